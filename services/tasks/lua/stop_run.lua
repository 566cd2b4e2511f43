-- ARGV: failed_event cause
-- A newer run of the task's thread interrupts it (multitask_strategy interrupt): a task
-- between steps (model phase: its reply would be dropped; waiting for a human) stops now,
-- keeping what it did; one whose tools run stops when they have joined (``advance`` in
-- common.lua finds the stop). A task that has ended already stays as it is.
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return snapshot(0) end
if redis.call('HGET', KEYS[1], 'phase') == 'tools' then
  redis.call('HSET', KEYS[1], 'stop', arg.failed_event)
  return snapshot(1)
end
redis.call('HSET', KEYS[1], 'cause', arg.cause)
finish('failed')
log(arg.failed_event)
return snapshot(1)

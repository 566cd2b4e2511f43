-- ARGV: failed_event cause
-- A running task fails now (a cancel, a deadline, a failed model call, a hook that
-- raised); a task that has ended already stays as it is.
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return snapshot(0) end
redis.call('HSET', KEYS[1], 'cause', arg.cause)
finish('failed')
log(arg.failed_event)
return snapshot(1)

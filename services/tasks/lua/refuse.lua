-- ARGV: failed_event cause retention create entry
-- A stage dead-lettered one of the task's events: the task cannot go on, so it fails now
-- with the stage's reason. A submission refused before the task started (create = 1)
-- gets a failed record of its own, so its waiting client hears why; a refused submission
-- for a task that exists ends it only if it is the entry that started it (its
-- redeliveries gave up), never when it is another submission of the same id. A task
-- that ended already stays as it is.
local status = redis.call('HGET', KEYS[1], 'status')
if status and status ~= 'running' then return snapshot(0) end
if status and arg.create == '1' and redis.call('HGET', KEYS[1], 'entry') ~= arg.entry then
  return snapshot(0)
end
if not status then
  if arg.create ~= '1' then return snapshot(0) end
  redis.call('HSET', KEYS[1], 'step', 0, 'agent', '', 'max_steps', 0,
             'retention', arg.retention)
end
redis.call('HSET', KEYS[1], 'cause', arg.cause)
finish('failed')
log(arg.failed_event)
return snapshot(1)

-- ARGV: agent_id max_steps submitted_event step_event retention messages entry extra
-- A submitted task starts at step 1 in the model phase with its input messages; a
-- redelivered submission (the same stream entry) finds it started and changes nothing.
-- Another submission of the same task id changes nothing either, and is told so
-- (applied = -1: the caller refuses it), so a replayed id never touches the task.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'entry') ~= arg.entry then return snapshot(-1) end
  return snapshot(0)
end
redis.call('HSET', KEYS[1], 'status', 'running', 'step', 1, 'phase', 'model',
           'agent', arg.agent_id, 'max_steps', arg.max_steps, 'cause', 'start',
           'expected', '[]', 'retention', arg.retention, 'entry', arg.entry)
if arg.extra ~= '' then redis.call('HSET', KEYS[1], 'extra', arg.extra) end
for _, msg in ipairs(cjson.decode(arg.messages)) do redis.call('RPUSH', KEYS[2], msg) end
log(arg.submitted_event)
log(arg.step_event)
return snapshot(1)

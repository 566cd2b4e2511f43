-- ARGV: agent_id max_steps submitted_event step_event retention messages todos extra thread_id
-- A run of a thread starts at step 1 in the model phase from the thread's state (its
-- transcript with the run's input messages after it, its todos, its middleware state);
-- a redelivered submission finds it started and changes nothing.
if redis.call('EXISTS', KEYS[1]) == 1 then return snapshot(0) end
redis.call('HSET', KEYS[1], 'status', 'running', 'step', 1, 'phase', 'model',
           'agent', arg.agent_id, 'max_steps', arg.max_steps, 'cause', 'start',
           'expected', '[]', 'retention', arg.retention, 'thread', arg.thread_id)
if arg.extra ~= '' then redis.call('HSET', KEYS[1], 'extra', arg.extra) end
if arg.todos ~= '' then redis.call('SET', KEYS[6], arg.todos) end
local msgs = cjson.decode(arg.messages)
for i = 1, #msgs, 500 do
  redis.call('RPUSH', KEYS[2], unpack(msgs, i, math.min(i + 499, #msgs)))
end
log(arg.submitted_event)
log(arg.step_event)
return snapshot(1)

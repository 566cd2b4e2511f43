-- ARGV: step cause pending approval_event
-- after_model hooks asked a human: the task waits in the approval phase with the model
-- reply it will resume with; nothing is pending anywhere, no compute is held.
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'model' then return snapshot(0) end
redis.call('HSET', KEYS[1], 'phase', 'approval', 'pending', arg.pending, 'cause', arg.cause)
log(arg.approval_event)
return snapshot(1)

-- ARGV: step cause pending approval_event node interrupt_id at resume answered done nodes_event
-- A hook of the loop stage called interrupt(): the task waits in the approval phase with
-- the event it resumes with (`pending`: the model's reply for after_model / after_agent
-- hooks, at = "after"; the step's StepStarted for before_agent / before_model, at =
-- "before"), the node and interrupt that wait, and the answers its nodes were given so far
-- (`resume`, JSON by node), and the updates of the nodes that ran to their end before it
-- (`done`: they are not run again). Nothing is pending anywhere, no compute is held. With
-- `answered` (the interrupt id a resume answered) the resumed node asked again: its next
-- interrupt waits in the place of the answered one. The nodes that ran to their end in this
-- run before the one that asks are logged before the request (`nodes_event`).
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'wait_id')
if s[1] ~= 'running' or s[2] ~= arg.step then return snapshot(0) end
if arg.answered == '' then
  if s[3] ~= 'model' then return snapshot(0) end
elseif s[3] ~= 'approval' or s[4] ~= arg.answered then
  return snapshot(0)
end
redis.call('HSET', KEYS[1], 'phase', 'approval', 'pending', arg.pending, 'cause', arg.cause,
           'wait_node', arg.node, 'wait_id', arg.interrupt_id, 'wait_at', arg.at,
           'resume', arg.resume, 'done_nodes', arg.done)
if arg.nodes_event ~= '' then log(arg.nodes_event) end
log(arg.approval_event)
return snapshot(1)

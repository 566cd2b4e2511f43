-- ARGV: step call_id interrupted_event approval_event refused_decision
-- Per-call approvals (HumanInTheLoopMiddleware, interrupt_mode="per_call"): a gated call
-- of the tools phase waits, recorded once under wait:<step>:<call id> (its
-- ToolInterrupted) with its ApprovalRequested logged. With refused_decision (the
-- decision the call's schema refused, if it is still the accepted one) the call waits
-- again: the refusal and a new ApprovalRequested are logged.
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'tools' then return snapshot(0) end
if not is_expected(cjson.decode(s[4]), arg.call_id) then return snapshot(0) end
if redis.call('HEXISTS', KEYS[4], arg.call_id) == 1 then return snapshot(0) end
local wait = 'wait:' .. arg.step .. ':' .. arg.call_id
local decided = 'decided:' .. arg.step .. ':' .. arg.call_id
if arg.refused_decision == '' then
  if redis.call('HSETNX', KEYS[1], wait, arg.interrupted_event) == 0 then return snapshot(0) end
  log(arg.approval_event)
  return snapshot(1)
end
if redis.call('HGET', KEYS[1], decided) ~= arg.refused_decision then return snapshot(0) end
redis.call('HDEL', KEYS[1], decided)
log(arg.interrupted_event)
log(arg.approval_event)
return snapshot(1)

-- ARGV: step call_id interrupted_event approval_event refused_decision answered
-- A tool call's interrupt (the tool's own interrupt(), or its wrap_tool_call chain's, such
-- as HumanInTheLoopMiddleware's per-call approvals): the call of the tools phase waits,
-- recorded once under wait:<step>:<call id> (its ToolInterrupted) with its
-- ApprovalRequested logged. With refused_decision (the answer the call's schema refused,
-- if it is still the accepted one) the call waits again: the refusal and a new
-- ApprovalRequested are logged. A call resumed with its answer that interrupts once more
-- (answered: one more than the waiting interrupt's) waits for its next answer: the
-- accepted one joins answers:<step>:<call id> (a JSON list, in order), which the call's
-- next run is given before its new answer.
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'tools' then return snapshot(0) end
if not is_expected(cjson.decode(s[4]), arg.call_id) then return snapshot(0) end
if redis.call('HEXISTS', KEYS[4], arg.call_id) == 1 then return snapshot(0) end
local suffix = arg.step .. ':' .. arg.call_id
local wait, decided = 'wait:' .. suffix, 'decided:' .. suffix
local count, answers = 'waitn:' .. suffix, 'answers:' .. suffix
if arg.refused_decision == '' then
  if redis.call('HSETNX', KEYS[1], wait, arg.interrupted_event) == 1 then
    redis.call('HSET', KEYS[1], count, arg.answered)
    log(arg.approval_event)
    return snapshot(1)
  end
  local accepted = redis.call('HGET', KEYS[1], decided)
  local waiting_n = tonumber(redis.call('HGET', KEYS[1], count) or '0')
  if not accepted or tonumber(arg.answered) ~= waiting_n + 1 then return snapshot(0) end
  local before = redis.call('HGET', KEYS[1], answers)
  if before then
    redis.call('HSET', KEYS[1], answers, string.sub(before, 1, -2) .. ',' .. accepted .. ']')
  else
    redis.call('HSET', KEYS[1], answers, '[' .. accepted .. ']')
  end
  redis.call('HDEL', KEYS[1], decided)
  redis.call('HSET', KEYS[1], wait, arg.interrupted_event, count, arg.answered)
  log(arg.approval_event)
  return snapshot(1)
end
if redis.call('HGET', KEYS[1], decided) ~= arg.refused_decision then return snapshot(0) end
redis.call('HDEL', KEYS[1], decided)
log(arg.interrupted_event)
log(arg.approval_event)
return snapshot(1)

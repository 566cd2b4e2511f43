-- ARGV: step call_id decision
-- Accepts one decision per waiting call. Replies outcome, decision: "decided" (this
-- one), "taken" (one was accepted before: that one), "done" (the call has its result),
-- "not-waiting".
local function outcome(name, decision)
  return {'outcome', name, 'decision', decision or ''}
end
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'tools' then return outcome('not-waiting') end
if redis.call('HEXISTS', KEYS[4], arg.call_id) == 1 then return outcome('done') end
local wait = 'wait:' .. arg.step .. ':' .. arg.call_id
local decided = 'decided:' .. arg.step .. ':' .. arg.call_id
if redis.call('HEXISTS', KEYS[1], wait) == 0 then return outcome('not-waiting') end
if redis.call('HSETNX', KEYS[1], decided, arg.decision) == 1 then
  return outcome('decided', arg.decision)
end
return outcome('taken', redis.call('HGET', KEYS[1], decided))

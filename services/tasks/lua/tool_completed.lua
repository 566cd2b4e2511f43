-- ARGV: step cause call_id tool_message tool_event step_event failed_event
-- One expected call of the tools phase has its result (the first result per call
-- counts); the last one joins them all and starts the next step.
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'tools' then return snapshot(0) end
local expected = cjson.decode(s[4])
if not is_expected(expected, arg.call_id) then return snapshot(0) end
if redis.call('HSETNX', KEYS[4], arg.call_id, arg.tool_message) == 0 then return snapshot(0) end
log(arg.tool_event)
if redis.call('HLEN', KEYS[4]) >= #expected then
  redis.call('HSET', KEYS[1], 'cause', arg.cause)
  advance(tonumber(arg.step), expected, arg.step_event, arg.failed_event)
end
return snapshot(1)

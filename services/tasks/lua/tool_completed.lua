-- ARGV: step cause call_id tool_message tool_event step_event failed_event update joined
-- One expected call of the tools phase has its result (the first result per call
-- counts); the last one joins them all and starts the next step. `update`: the state
-- keys a tool's Command(update=...) sets, as a JSON list [key, value JSON, ...], or
-- empty; kept with the call until the join. `joined`: the task's state keys once the
-- step's updates are applied, in call order, through the keys' reducers (the caller
-- computes it: the reducers are Python, services.spec.channels). A result that would
-- join a step with updates and comes without it changes nothing and replies applied
-- = -2: the caller reads the updates (all in now), computes `joined` and sends again.
-- `failed_event` (the step limit's TaskFailed) likewise: a result that would join the
-- step at the limit and comes without it changes nothing and replies applied = -3 (most
-- results never need it, so it is not sent with them).
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'expected', 'updates',
                    'end_after', 'max_steps', 'stop')
if s[1] ~= 'running' or s[2] ~= arg.step or s[3] ~= 'tools' then return snapshot(0) end
local expected = cjson.decode(s[4])
if not is_expected(expected, arg.call_id) then return snapshot(0) end
-- A step of one call joins with its result: had a result of it come before, the step
-- would have moved on (refused above). Of more calls, the first result per call counts.
local joins = true
if #expected > 1 then
  if redis.call('HEXISTS', KEYS[4], arg.call_id) == 1 then return snapshot(0) end
  joins = redis.call('HLEN', KEYS[4]) + 1 >= #expected
end
local updates = s[5] or arg.update ~= ''
if joins and updates and arg.joined == '' then return snapshot(-2) end
if joins and arg.failed_event == '' and not s[6] and not s[8]
   and tonumber(arg.step) + 1 > tonumber(s[7]) then
  return snapshot(-3)
end
log(arg.tool_event)
if not joins then
  redis.call('HSET', KEYS[4], arg.call_id, arg.tool_message)
  if arg.update ~= '' then
    redis.call('HSET', KEYS[8], arg.call_id .. ':update', arg.update)
    redis.call('HSET', KEYS[1], 'updates', 1)
  end
  return snapshot(1)
end
if updates then
  redis.call('HSET', KEYS[1], 'extra', arg.joined)
  redis.call('HDEL', KEYS[1], 'updates')
  for _, id in ipairs(expected) do redis.call('HDEL', KEYS[8], id .. ':update') end
end
-- the joining result goes to the transcript as it came, never through the results hash
advance(tonumber(arg.step), expected, arg.step_event, arg.failed_event,
        {[arg.call_id] = arg.tool_message}, arg.cause, {s[6], s[7], s[8]})
return snapshot(1)

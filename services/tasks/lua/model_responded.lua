-- ARGV: step cause ai_message responded_event expected pre_results completed_event step_event failed_event after_ai extra issued end_after limit_event nodes_event again rewrite
-- The model answered step `step` (model phase, or approval when a human decided): the
-- reply joins the transcript; without calls to wait for the task completes, else it
-- moves to the tools phase (results decided by after_model hooks are in already, and
-- when they are all the results, the next step starts). The after_model (and after_agent)
-- hooks that ran on the reply are logged after it (`nodes_event`, when there were any).
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'wait_at')
if s[1] ~= 'running' or s[2] ~= arg.step then return snapshot(0) end
-- waiting: only for the answer to an after_model hook's interrupt (before the model
-- call, no reply of this step can be there yet)
if s[3] ~= 'model' and not (s[3] == 'approval' and s[4] ~= 'before') then return snapshot(0) end
local step = tonumber(arg.step)
-- an interrupt's fields are written together (interrupt.lua): wait_at says they are there
if s[4] then
  redis.call('HDEL', KEYS[1], 'pending', 'wait_node', 'wait_id', 'wait_at', 'resume',
             'done_nodes')
end
-- the model node's writes changed the messages before the reply: they replace the
-- transcript (a new revision: copies of the old one are stale)
-- (a run of the old messages kept is named [start, count], 0-based)
if arg.rewrite ~= '' then
  local old = redis.call('LRANGE', KEYS[2], 0, -1)
  local msgs = {}
  for _, item in ipairs(cjson.decode(arg.rewrite)) do
    if type(item) == 'table' then
      for i = item[1] + 1, item[1] + item[2] do msgs[#msgs + 1] = old[i] end
    else
      msgs[#msgs + 1] = item
    end
  end
  redis.call('DEL', KEYS[2])
  for i = 1, #msgs, 500 do
    redis.call('RPUSH', KEYS[2], unpack(msgs, i, math.min(i + 499, #msgs)))
  end
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
redis.call('RPUSH', KEYS[2], arg.ai_message)
if arg.after_ai ~= '[]' then
  for _, msg in ipairs(cjson.decode(arg.after_ai)) do redis.call('RPUSH', KEYS[2], msg) end
end
if arg.extra ~= '' then redis.call('HSET', KEYS[1], 'extra', arg.extra) end
log(arg.responded_event)
if arg.nodes_event ~= '' then log(arg.nodes_event) end
-- the step limit leaves no room for what the reply asks: the task fails with it
if arg.limit_event ~= '' then
  redis.call('HSET', KEYS[1], 'cause', arg.cause)
  finish('failed')
  log(arg.limit_event)
  return snapshot(1)
end
local expected = cjson.decode(arg.expected)
if #expected == 0 and arg.again == '1' then
  -- an after_agent hook sent the agent back to the model: the next step starts
  redis.call('HSET', KEYS[1], 'cause', arg.cause)
  advance(step, expected, arg.step_event, arg.failed_event)
  return snapshot(1)
end
if #expected == 0 then
  redis.call('HSET', KEYS[1], 'cause', arg.cause)
  finish('completed')
  log(arg.completed_event)
  return snapshot(1)
end
redis.call('HSET', KEYS[1], 'phase', 'tools', 'expected', arg.expected, 'cause', arg.cause,
           'issued', arg.issued)
-- the completion to log when this step's results are in (instead of the next step)
if arg.end_after ~= '' then redis.call('HSET', KEYS[1], 'end_after', arg.end_after) end
local n = 0
if arg.pre_results ~= '{}' then
  for id, msg in pairs(cjson.decode(arg.pre_results)) do
    redis.call('HSET', KEYS[4], id, msg)
    n = n + 1
  end
end
if n >= #expected then advance(step, expected, arg.step_event, arg.failed_event) end
return snapshot(1)

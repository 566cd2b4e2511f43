-- ARGV: step cause append rewrite extra end_now completed_event nodes_event
-- The before_model (and, at step 1, before_agent) hooks of a step, applied once per
-- step: messages appended, or the whole transcript rewritten (the revision moves), their
-- state fields stored, and the task completed when they jumped to the end. Also from
-- the approval phase when one of them waited for an answer to its interrupt (wait_at
-- "before"): the step goes on in the model phase. The hooks that ran are logged
-- (`nodes_event`).
local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'bm_step', 'wait_at')
if s[1] ~= 'running' or s[2] ~= arg.step or s[4] == arg.step then return snapshot(0) end
if s[3] ~= 'model' and not (s[3] == 'approval' and s[5] == 'before') then
  return snapshot(0)
end
redis.call('HSET', KEYS[1], 'bm_step', arg.step, 'cause', arg.cause, 'phase', 'model')
redis.call('HDEL', KEYS[1], 'pending', 'wait_node', 'wait_id', 'wait_at', 'resume', 'done_nodes')
if arg.nodes_event ~= '' then log(arg.nodes_event) end
if arg.rewrite ~= '' then
  redis.call('DEL', KEYS[2])
  for _, msg in ipairs(cjson.decode(arg.rewrite)) do redis.call('RPUSH', KEYS[2], msg) end
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
for _, msg in ipairs(cjson.decode(arg.append)) do redis.call('RPUSH', KEYS[2], msg) end
if arg.extra ~= '' then redis.call('HSET', KEYS[1], 'extra', arg.extra) end
if arg.end_now == '1' then
  finish('completed')
  log(arg.completed_event)
end
return snapshot(1)

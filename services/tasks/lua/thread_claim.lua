-- ARGV: task_id strategy submitted_event now again
-- A run asks for its thread (KEYS: the thread's state, messages, todos, runs, log, queue,
-- pending). A free thread makes it the active run and replies with the thread's state to
-- start from; a busy one rejects it, queues it, or queues it first and asks the active run
-- to stop (interrupt, rollback). At most one run of a thread is active: this script is
-- the only way in. A redelivered submission finds its run known and changes nothing
-- (``again``: the loop asks once more after ending a run that had ended unrecorded).
local known = redis.call('HGET', KEYS[4], arg.task_id)
local function started()
  return {'outcome', 'start', 'active', arg.task_id,
          'messages', redis.call('LRANGE', KEYS[2], 0, -1),
          'todos', redis.call('GET', KEYS[3]) or '',
          'extra', redis.call('HGET', KEYS[1], 'extra') or '',
          'submission', redis.call('HGET', KEYS[7], arg.task_id) or ''}
end
if known == 'active' then return started() end
local active = redis.call('HGET', KEYS[1], 'active') or ''
if known == 'rejected' and arg.again ~= '1' then
  return {'outcome', 'busy', 'active', active}
end
if known and known ~= 'rejected' then return {'outcome', 'known', 'active', active} end
if active ~= '' then
  if arg.strategy == 'reject' then
    redis.call('HSET', KEYS[4], arg.task_id, 'rejected')
    return {'outcome', 'busy', 'active', active}
  end
  redis.call('HSET', KEYS[4], arg.task_id, 'queued')
  redis.call('HSET', KEYS[7], arg.task_id, arg.submitted_event)
  if arg.strategy == 'enqueue' then
    redis.call('RPUSH', KEYS[6], arg.task_id)
    return {'outcome', 'queued', 'active', active}
  end
  -- interrupt, rollback: this run goes next, and the active one is asked to stop
  redis.call('LPUSH', KEYS[6], arg.task_id)
  redis.call('HSET', KEYS[1], 'stop', active, 'stop_mode', arg.strategy)
  return {'outcome', 'stop', 'active', active}
end
redis.call('HSET', KEYS[4], arg.task_id, 'active')
redis.call('HSET', KEYS[1], 'active', arg.task_id, 'active_since', arg.now, 'updated', arg.now)
redis.call('HSETNX', KEYS[1], 'created', arg.now)
redis.call('XADD', KEYS[5], '*', '__DATA__', arg.submitted_event)
for i = 1, #KEYS do redis.call('PERSIST', KEYS[i]) end
return started()

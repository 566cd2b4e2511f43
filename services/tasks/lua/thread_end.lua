-- ARGV: task_id status messages todos extra ended_event ttl now write_back hand_s
-- The thread's active run ended: its transcript, todos and middleware state become the
-- thread's (unless it was rolled back), its end goes on the thread's log, and the next
-- queued run, if any, becomes the active one (the caller starts it). Once no run waits,
-- the thread's keys expire after ``ttl`` seconds where the operator set one (threads
-- last until deleted by default; a new run PERSISTs them again in thread_claim.lua). Any other run's
-- end (a redelivery, a run that never was active) changes nothing; a run that never
-- started from the thread (its submission was refused) writes nothing back. ``hand_s``
-- > 0: the run hands its transcript over to the thread's (``set_transcript``) and keeps
-- its keys that long; the reply's ``epoch`` is where the run finds it.
if redis.call('HGET', KEYS[1], 'active') ~= arg.task_id then
  return {'outcome', 'stale', 'status', '', 'next', ''}
end
local mode = ''
if redis.call('HGET', KEYS[1], 'stop') == arg.task_id then
  mode = redis.call('HGET', KEYS[1], 'stop_mode') or ''
  redis.call('HDEL', KEYS[1], 'stop', 'stop_mode')
end
local status = arg.status
local epoch = ''
if mode == 'rollback' then
  status = 'rolled_back'
elseif arg.write_back == '1' then
  epoch = set_transcript(cjson.decode(arg.messages))
  local hand_s = tonumber(arg.hand_s) or 0
  if hand_s > 0 then
    local until_at = tonumber(arg.now) + hand_s
    if until_at > tonumber(redis.call('HGET', KEYS[1], 'handed_until') or '0') then
      redis.call('HSET', KEYS[1], 'handed_until', until_at)
    end
  end
  if arg.todos ~= '' then redis.call('SET', KEYS[3], arg.todos) end
  if arg.extra ~= '' then redis.call('HSET', KEYS[1], 'extra', arg.extra) end
end
redis.call('HSET', KEYS[4], arg.task_id, status)
redis.call('XADD', KEYS[5], '*', '__DATA__', arg.ended_event)
redis.call('HSET', KEYS[1], 'active', '', 'last_run', arg.task_id, 'updated', arg.now)
redis.call('HINCRBY', KEYS[1], 'runs', 1)
local nxt = redis.call('LPOP', KEYS[6])
if nxt then
  redis.call('HSET', KEYS[1], 'active', nxt, 'active_since', arg.now)
  redis.call('HSET', KEYS[4], nxt, 'active')
  local submitted = redis.call('HGET', KEYS[7], nxt)
  if submitted then redis.call('XADD', KEYS[5], '*', '__DATA__', submitted) end
  return {'outcome', 'ended', 'status', status, 'next', nxt, 'epoch', epoch}
end
local ttl = tonumber(arg.ttl) or 0
if ttl > 0 then for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end end
return {'outcome', 'ended', 'status', status, 'next', '', 'epoch', epoch}

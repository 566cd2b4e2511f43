-- ARGV: task_id
-- A run that waits for its thread is cancelled: it leaves the queue (it never starts).
-- Any other run (active, ended, unknown) is left as it is.
if redis.call('HGET', KEYS[4], arg.task_id) ~= 'queued' then return 0 end
redis.call('LREM', KEYS[6], 0, arg.task_id)
redis.call('HDEL', KEYS[7], arg.task_id)
redis.call('HSET', KEYS[4], arg.task_id, 'cancelled')
return 1

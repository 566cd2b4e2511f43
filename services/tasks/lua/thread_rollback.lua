-- ARGV: task_id
-- A client cancels the thread's active run with ``rollback``: when it ends, nothing of it
-- is written back to the thread and its status is rolled_back (``thread_end.lua``), as
-- for a run stopped by a newer one's ``multitask_strategy="rollback"``. Any other run
-- (queued, ended, unknown) is left as it is.
if redis.call('HGET', KEYS[1], 'active') ~= arg.task_id then return 0 end
redis.call('HSET', KEYS[1], 'stop', arg.task_id, 'stop_mode', 'rollback')
return 1

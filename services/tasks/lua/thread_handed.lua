-- ARGV: handed
-- A run that ended on its thread hands its transcript over (KEYS: the task's state,
-- transcript, token counts): its state names where it is read in the thread's
-- (``HANDED``: epoch and length), and its own copy goes, in one step, so a reader sees
-- one or the other (``services.tasks.threads.handed_or_own``).
redis.call('HSET', KEYS[1], 'handed', arg.handed)
redis.call('DEL', KEYS[2], KEYS[3])
return 1

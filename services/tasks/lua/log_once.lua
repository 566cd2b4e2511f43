-- ARGV: dedupe event
-- Appends an event to the task's log once per dedupe key (a todo update, a context
-- edit: their services may see the same call twice).
if redis.call('SADD', KEYS[5], arg.dedupe) == 0 then return {'applied', 0} end
log(arg.event)
return {'applied', 1}

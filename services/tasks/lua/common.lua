-- Shared by every task transition (prepended to each script).
-- KEYS[1..TASK_KEYS] are the task's own keys, in TaskKeys order: state, messages, log,
-- results, logged, todos, tokens, calls. What a fused commit adds (shared streams, the
-- deadlines set, the acked stream) comes after them and is never expired with the task.
-- TASK_KEYS, ARGC and the table `arg` (this transition's arguments by name) are defined
-- by services.tasks.transition before this file.

-- The task's state right after the attempt: decoded by name (services.tasks.state).
local function snapshot(applied)
  local s = redis.call('HMGET', KEYS[1], 'status', 'step', 'phase', 'cause', 'expected',
                      'agent', 'rev', 'bm_step', 'thread')
  -- The step's calls already answered: the caller publishes only the others.
  local done = {}
  if s[3] == 'tools' then done = redis.call('HKEYS', KEYS[4]) end
  return {applied = applied, status = s[1] or '', step = s[2] or '0', phase = s[3] or '',
          cause = s[4] or '', transcript_len = redis.call('LLEN', KEYS[2]),
          expected = s[5] or '[]', agent_id = s[6] or '', rev = s[7] or '0',
          hooks_step = s[8] or '0', thread = s[9] or '', done = done}
end

-- The reply: name, value pairs (a nil field, `committed` outside a fused commit, is left out).
local REPLY_FIELDS = {'applied', 'status', 'step', 'phase', 'cause', 'transcript_len',
                      'expected', 'agent_id', 'rev', 'hooks_step', 'thread', 'done',
                      'committed'}
local function reply(snap)
  local out = {}
  for _, name in ipairs(REPLY_FIELDS) do
    if snap[name] ~= nil then
      out[#out + 1] = name
      out[#out + 1] = snap[name]
    end
  end
  return out
end

local function log(event)
  redis.call('XADD', KEYS[3], '*', '__DATA__', event)
end

-- A finished task keeps its own keys for the retention time, then Redis drops them.
local function finish(status)
  redis.call('HSET', KEYS[1], 'status', status, 'phase', 'done')
  local ttl = tonumber(redis.call('HGET', KEYS[1], 'retention') or '0')
  if ttl and ttl > 0 then
    for i = 1, TASK_KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
  end
end

-- Append the step's tool results in call order, then start the next step or stop at
-- the step limit. `known`: results the caller holds by call id (the joining one, never
-- stored in the results hash); `cause`: the state's new cause, written with the rest;
-- `flags`: the state's end_after, max_steps and stop when the caller read them already.
local function advance(step, expected, step_event, failed_event, known, cause, flags)
  known = known or {}
  local messages, fetched = {}, false
  for i, id in ipairs(expected) do
    messages[i] = known[id]
    if messages[i] == nil then
      messages[i] = redis.call('HGET', KEYS[4], id)
      fetched = true
    end
  end
  for i = 1, #messages, 1000 do  -- one RPUSH for the usual step (unpack's stack is bounded)
    redis.call('RPUSH', KEYS[2], unpack(messages, i, math.min(i + 999, #messages)))
  end
  if fetched then redis.call('DEL', KEYS[4]) end
  flags = flags or redis.call('HMGET', KEYS[1], 'end_after', 'max_steps', 'stop')
  local ending, max_steps, stop = flags[1], tonumber(flags[2]), flags[3]
  if cause and (ending or stop or step + 1 > max_steps) then
    redis.call('HSET', KEYS[1], 'cause', cause)
  end
  -- a reply that gave a structured response ends the task once its other calls ran
  if ending then
    redis.call('HDEL', KEYS[1], 'end_after')
    finish('completed')
    log(ending)
    return
  end
  -- a newer run of the task's thread asked it to stop at this boundary (stop_run.lua)
  if stop or step + 1 > max_steps then
    finish('failed')
    log(stop or failed_event)
  elseif cause then
    redis.call('HSET', KEYS[1], 'step', step + 1, 'phase', 'model', 'expected', '[]',
               'cause', cause)
    log(step_event)
  else
    redis.call('HSET', KEYS[1], 'step', step + 1, 'phase', 'model', 'expected', '[]')
    log(step_event)
  end
end

local function is_expected(expected, call_id)
  for _, id in ipairs(expected) do if id == call_id then return true end end
  return false
end

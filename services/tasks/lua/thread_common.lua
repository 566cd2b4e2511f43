-- Shared by the thread scripts (prepended to each; KEYS[1] is the thread's state hash,
-- KEYS[2] its transcript).
--
-- The thread's transcript is also the transcript of each run that ended on it: a run
-- hands its own copy over (``ThreadStore.hand_over``) and reads it back as the first
-- ``length`` messages of the thread's transcript at ``epoch``. So the transcript only
-- grows while it is appended to; a write that changes what is already there moves the
-- ``epoch`` on and keeps the old list under ``<transcript>@<old epoch>`` for as long as
-- a run that handed it over lives (``handed_until``), or deletes it when none does.

-- The thread's transcript becomes ``msgs`` (JSON strings); the epoch it is at now.
local function set_transcript(msgs)
  local old = redis.call('LRANGE', KEYS[2], 0, -1)
  local same = #old <= #msgs
  if same then
    for i = 1, #old do
      if old[i] ~= msgs[i] then same = false; break end
    end
  end
  local from = #old + 1
  if not same then
    local was = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
    local until_at = tonumber(redis.call('HGET', KEYS[1], 'handed_until') or '0')
    local now = tonumber(redis.call('TIME')[1])
    if until_at > now then
      local kept = KEYS[2] .. '@' .. was
      redis.call('RENAME', KEYS[2], kept)
      redis.call('EXPIREAT', kept, math.ceil(until_at))
    else
      redis.call('DEL', KEYS[2])
    end
    redis.call('HSET', KEYS[1], 'epoch', was + 1)
    from = 1
  end
  for i = from, #msgs, 500 do
    redis.call('RPUSH', KEYS[2], unpack(msgs, i, math.min(i + 499, #msgs)))
  end
  return tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
end

-- Runs the transition, then, when it was applied and the task is now in one of the
-- predicted phases, commits the entry being handled in the same script: in the publish
-- phase it publishes the outputs (only if the transcript has the length they were built
-- for), a task that ended leaves the deadlines set, then the entry's own publishes,
-- writes and XACK (commit, from services.entry).
-- ARGV after the transition's own: phases (",tools,done,"), publish_phase, expect_len
-- ("" for any), n outputs, the n encoded outputs, task_id, then commit's arguments.
-- KEYS after the task's own: the n output streams, the deadlines set, then commit's keys.
local k, a = TASK_KEYS + 1, ARGC + 1
local snap = transition()
local fire = snap.applied == 1 and string.find(ARGV[a], ',' .. snap.phase .. ',', 1, true) ~= nil
local publish = snap.phase == ARGV[a + 1]
if fire and publish and ARGV[a + 2] ~= '' then
  fire = tonumber(ARGV[a + 2]) == tonumber(snap.transcript_len)
end
if not fire then
  snap.committed = 0
  return reply(snap)
end
local n = tonumber(ARGV[a + 3])
if publish then
  for i = 0, n - 1 do
    redis.call('XADD', KEYS[k + i], '*', '__DATA__', ARGV[a + 4 + i])
  end
end
if snap.phase == 'done' then redis.call('ZREM', KEYS[k + n], ARGV[a + 4 + n]) end
commit(k + n + 1, a + 5 + n)
snap.committed = 1
return reply(snap)

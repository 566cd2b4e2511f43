-- Runs the transition, then, when it was applied and the task is now in one of the
-- predicted phases, commits the entry being handled in the same script: in the publish
-- phase it publishes the outputs (only if the transcript has the length they were built
-- for), a task that ended leaves the deadlines set, then the entry's own publishes,
-- writes and XACK (commit, from services.entry).
-- ARGV after the transition's own: phases (",tools,done,"), publish_phase, expect_len
-- ("" for any), n outputs, the n encoded outputs, task_id, then commit's arguments.
-- KEYS after the task's own: the n output streams, the deadlines set, then commit's keys.
-- The transition's own snapshot() is `applied` alone here (see services.tasks.transition):
-- what the commit decides on is read once below; the whole state is read only when the
-- entry is left to its handler, which goes on from it. A committed entry's handler reads
-- no more than `committed_reply` gives (services.tasks.state.TaskState.committed).
local k, a = TASK_KEYS + 1, ARGC + 1
local applied = transition().applied
local s = redis.call('HMGET', KEYS[1], 'status', 'phase', 'agent', 'thread')
local phase = s[2] or ''
local fire = applied == 1 and string.find(ARGV[a], ',' .. phase .. ',', 1, true) ~= nil
local publish = phase == ARGV[a + 1]
if fire and publish and ARGV[a + 2] ~= '' then
  fire = tonumber(ARGV[a + 2]) == redis.call('LLEN', KEYS[2])
end
if not fire then
  local snap = full_snapshot(applied)
  snap.committed = 0
  return reply(snap)
end
local n = tonumber(ARGV[a + 3])
if publish then
  for i = 0, n - 1 do
    redis.call('XADD', KEYS[k + i], '*', '__DATA__', ARGV[a + 4 + i])
  end
end
if phase == 'done' then redis.call('ZREM', KEYS[k + n], ARGV[a + 4 + n]) end
commit(k + n + 1, a + 5 + n)
return {'applied', applied, 'status', s[1] or '', 'phase', phase, 'agent_id', s[3] or '',
        'thread', s[4] or '', 'committed', 1}

-- intent.lua: before a script that may create reaper work on a queue (a lease, a delayed
-- enqueue, a fail, an ack), announces it in the queue's shard of the due index (not a queue script: it
-- touches only the index; DESIGN.md section 10).
-- KEYS: [1] the queue's due-index shard (zset: '<queue>' -> next due ms, '+<queue>' -> an intent).
-- ARGV: [1] the intent member '+<queue>', [2] ahead: how far after now it comes due at the
--       latest, ms, [3] guard: how soon after now it may come due at the earliest, ms,
--       optional: [4] the queue's own member '<queue>' and [5] a due time, ms, that an
--       earlier write of this server held back (due_later.rs): set as a ZADD LT would.
-- The intent comes due at most `ahead` after the first write not yet reaped (LT), so it is
-- never put off by later writes; but never sooner than `guard` after this write (it is
-- moved up to that if it would), so the reaper that acts on it runs its reap after this
-- write's script (sent right after this call). The reaper then records the queue's real
-- next due time under '<queue>' and drops the intent if it is unchanged (due.lua): a write
-- whose own index update (after its reply) is lost to a crash is still reaped in time.
-- Reply: 1.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local latest, earliest = now + tonumber(ARGV[2]), now + tonumber(ARGV[3])
local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not cur or latest < cur then
  redis.call('ZADD', KEYS[1], latest, ARGV[1])
elseif cur < earliest then
  redis.call('ZADD', KEYS[1], earliest, ARGV[1])
end
if ARGV[5] then redis.call('ZADD', KEYS[1], 'LT', ARGV[5], ARGV[4]) end
return 1

-- due.lua: moves one queue's entry in a due-index shard after a reap (not a queue
-- script: it touches only the index, never a queue's keys; DESIGN.md section 10).
-- KEYS: [1] the queue's due-index shard (zset: '<queue>' -> next due ms, '+<queue>' -> a write's intent,
--       see intent.lua).
-- ARGV: [1] the member the reap was for ('<queue>' or '+<queue>'), [2] the score the caller
--       saw before reaping ('' none), [3] the next due time the reap reported, ms, or -1 for
--       nothing due, [4] for an intent member: the queue's own member '<queue>'.
-- A queue's own member: if it still holds the score the caller saw, nobody announced new
-- work meanwhile: it becomes the reported time (or goes, with nothing due). Otherwise a
-- writer lowered it since: keep the earlier of the two.
-- An intent member: it goes if it still holds the score seen (a newer intent raised it
-- otherwise: it stays for its own reap); the reported time goes to the queue's own member
-- (or earlier, if that says so).
-- Reply: 1.
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
local nxt = tonumber(ARGV[3])
local unchanged = cur and ARGV[2] ~= '' and tonumber(cur) == tonumber(ARGV[2])
if ARGV[4] then
  if unchanged then redis.call('ZREM', KEYS[1], ARGV[1]) end
  if nxt >= 0 then redis.call('ZADD', KEYS[1], 'LT', nxt, ARGV[4]) end
elseif unchanged then
  if nxt < 0 then
    redis.call('ZREM', KEYS[1], ARGV[1])
  else
    redis.call('ZADD', KEYS[1], nxt, ARGV[1])
  end
elseif nxt >= 0 then
  redis.call('ZADD', KEYS[1], 'LT', nxt, ARGV[1])
end
return 1

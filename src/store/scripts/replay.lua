-- replay.lua: moves dead jobs back to waiting under their ids, with a fresh attempt budget
-- (attempts made = 0; the error history stays) and no expire time: a job replayed on
-- purpose gets a run, whatever its ttl said (attempts.lua, "Cancel and expiry"). Replaying a
-- job that is not dead does nothing and reports it as skipped, so a replay is idempotent.
-- ARGV: [1] wake channel, [2] 'ids' | 'filter';
--   ids:    [3] n, [4 ..] ids
--   filter: [3 .. 8] filter (name, error type, reason, message prefix, after ms, before ms;
--           '' / -1 = any), [9] cursor score ('' = start), [10] max entries to examine,
--           [11] last score of the walk ('' on its first call: the newest dead entry now)
-- Reply: { replayed ids, skipped ids, next cursor ('' = done), last score of the walk }
local now = now_ms()
local replayed = {}
local function replay(id, h)
  redis.call('ZREM', K_DEAD, id)
  h[DR], h[FT], h[ATT], h[RP], h[XA] = '', 0, 0, h[RP] + 1, 0
  make_ready(id, h, now)
  replayed[#replayed + 1] = id
end
local skipped, cursor, upto = for_selected_dead(replay)
if #replayed > 0 then redis.call(WAKE_CMD, WAKE, '1') end
return { replayed, skipped, cursor, upto }

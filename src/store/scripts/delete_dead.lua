-- delete_dead.lua: removes dead jobs (and their error histories) for good. Deleting a job that is not dead does nothing
-- and reports it as skipped.
-- ARGV: [1] wake channel (unused), [2] 'ids' | 'filter';
--   ids:    [3] n, [4 ..] ids
--   filter: [3 .. 8] filter, [9] cursor score ('' = start), [10] max entries to examine,
--           [11] last score of the walk ('' on its first call: the newest dead entry now)
-- Reply: { deleted ids, skipped ids, next cursor ('' = done), last score of the walk }
local deleted = {}
local function delete(id)
  redis.call('ZREM', K_DEAD, id)
  delete_jobs({ id })
  deleted[#deleted + 1] = id
end
-- Only headers are read (bodies are not copied into Lua).
local skipped, cursor, upto = for_selected_dead(delete)
return { deleted, skipped, cursor, upto }

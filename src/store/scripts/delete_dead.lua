-- delete_dead.lua: removes dead jobs for good. Deleting a job that is not dead does nothing
-- and reports it as skipped.
-- ARGV: [1] wake channel (unused), [2] 'ids' | 'filter';
--   ids:    [3] n, [4 ..] ids
--   filter: [3 .. 8] filter, [9] cursor score ('' = start), [10] max entries to examine
-- Reply: { deleted ids, skipped ids, next cursor ('' = done) }
local deleted, skipped = {}, {}
local function delete(id, jk)
  redis.call('ZREM', K_DEAD, id)
  redis.call('DEL', jk)
  deleted[#deleted + 1] = id
end
local cursor = ''
if ARGV[2] == 'ids' then
  for i = 1, tonumber(ARGV[3]) do
    local id = ARGV[3 + i]
    local jk = job_key(id)
    if redis.call('HGET', jk, 'st') == 'dead' then delete(id, jk) else skipped[#skipped + 1] = id end
  end
else
  local filter = read_filter(3)
  local budget = tonumber(ARGV[10])
  cursor = scan_dead(ARGV[9], budget, budget, filter, delete)
end
return { deleted, skipped, cursor }

-- list_dead.lua: reads a page of dead jobs in dead-time order, filtered. Read-only.
-- ARGV: [1] wake channel (unused), [2 .. 7] filter, [8] cursor score ('' = start),
--       [9] page size, [10] max entries to examine
-- Reply: { next cursor ('' = done), per job: { id, record } }
local filter = read_filter(2)
local out = { '' }
local function collect(id, jk, h, body, rec)
  out[#out + 1] = { id, rec }
end
out[1] = scan_dead(ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), filter, collect)
return out

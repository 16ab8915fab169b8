-- list_dead.lua: reads a page of dead jobs in dead-time order, filtered, with each job's
-- error history (see common.lua). Read-only. The page ends early once its records and
-- histories pass a byte budget, so one call moves a bounded amount of data.
-- ARGV: [1] wake channel (unused), [2 .. 7] filter, [8] cursor score ('' = start),
--       [9] page size, [10] max entries to examine, [11] byte budget of the page
-- Reply: { next cursor ('' = done), per job: { id, record, history (read_history) } }
local filter = read_filter(2)
local budget = tonumber(ARGV[11])
local out = { '' }
local size = 0
local function collect(id, h, hdr)
  local rec = hdr .. get_body(id)
  local history = read_history(id)
  out[#out + 1] = { id, rec, history }
  size = size + #rec
  for _, v in ipairs(history) do size = size + #v end
  return size >= budget
end
out[1] = scan_dead(ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10]), filter, collect)
return out

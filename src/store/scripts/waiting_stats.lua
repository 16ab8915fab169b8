-- waiting_stats.lua: how many jobs wait, and when the oldest of them became ready. Within
-- a priority waiting jobs are in ready order, so the oldest job is the first one of some
-- priority: this reads the head of the priority-0 list and the first job of each other
-- priority in use (one ZRANGE per priority, at most 2000; common.lua, KEYS 15), and the
-- grouped job made ready first (groups.lua). Read-only.
-- (A delayed job promoted late carries its due time, so the age can be off by the promotion
-- lag, ~the reaper interval.)
-- The same jobs give the oldest ready time per priority (starvation under a saturated limit
-- shows there): exact for the default group; of the named groups only the grouped job made
-- ready first counts, under its own priority.
-- ARGV: [1] wake channel (unused).
-- Reply: { waiting jobs, ready time of the oldest waiting job in ms or -1 when none waits,
--          groups with waiting jobs (the default group counts when it has some),
--          { priority, ready time of its oldest waiting job in ms, ... } highest first }.
local oldest = -1
local by_pri, pris = {}, {}
local function consider(id)
  local h = id and load_job(id)
  if not h then return end
  if oldest < 0 or h[RT] < oldest then oldest = h[RT] end
  local p = h[PRI]
  if by_pri[p] == nil then
    pris[#pris + 1] = p
    by_pri[p] = h[RT]
  elseif h[RT] < by_pri[p] then
    by_pri[p] = h[RT]
  end
end
consider(redis.call('LINDEX', K_WAITING, 0))
-- Of the named groups' jobs, the one made ready first (groups.lua, KEYS 21).
consider(group_oldest_id())
local from = '-inf'
while true do
  local first = redis.call('ZRANGE', K_PRIO, from, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if not first[1] then break end
  consider(first[1])
  from = int((math.floor(tonumber(first[2]) / LEVEL) + 1) * LEVEL)
end
local groups = redis.call('ZCARD', K_GCOUNT)
if redis.call('EXISTS', K_WAITING, K_PRIO) > 0 then groups = groups + 1 end
table.sort(pris, function(a, b) return a > b end)
local levels = {}
for _, p in ipairs(pris) do
  levels[#levels + 1] = p
  levels[#levels + 1] = by_pri[p]
end
return { waiting_count(), oldest, groups, levels }

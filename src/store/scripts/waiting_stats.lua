-- waiting_stats.lua: how many jobs wait, and when the oldest of them became ready. Within
-- a priority level waiting jobs are in ready order, so the oldest job is the first one of
-- some level: this reads the first job of each level in use (at most 2001 levels). Read-only.
-- (A delayed job promoted late carries its due time, so the age can be off by the promotion
-- lag, ~the reaper interval.)
-- ARGV: [1] wake channel (unused).
-- Reply: { waiting jobs, ready time of the oldest waiting job in ms or -1 when none waits }.
local count, oldest = 0, -1
for _, level in ipairs(redis.call('ZRANGE', K_WAITING, 0, -1)) do
  local key = level_key(level)
  count = count + redis.call('LLEN', key)
  local first = redis.call('LINDEX', key, 0)
  local h = first and load_job(job_key(first))
  if h and (oldest < 0 or h[RT] < oldest) then oldest = h[RT] end
end
return { count, oldest }

-- oldest_waiting.lua: when the oldest waiting job became ready, without a per-job index:
-- within a priority level waiting jobs are in ready order, so the oldest job is the first one
-- of some level; this visits the first job of each level in use (at most 2001 levels, each
-- found in O(log n)) and returns the smallest ready time. Read-only. (A delayed job promoted
-- late carries its due time, so the answer can be off by the promotion lag, ~the reaper
-- interval.)
-- ARGV: [1] wake channel (unused).
-- Reply: the ready time of the oldest waiting job, ms, or -1 when none waits.
local oldest = -1
local first = redis.call('ZRANGE', K_WAITING, 0, 0, 'WITHSCORES')
while first[1] do
  local rt = tonumber(redis.call('HGET', job_key(first[1]), 'rt'))
  if rt and (oldest < 0 or rt < oldest) then oldest = rt end
  local level = math.floor(tonumber(first[2]) / PRIORITY_SPAN)
  first = redis.call('ZRANGE', K_WAITING, int((level + 1) * PRIORITY_SPAN), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
end
return oldest

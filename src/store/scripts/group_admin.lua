-- group_admin.lua: changes one named group's own config, or pauses or resumes it
-- (GroupService; groups.lua describes the keys). A group whose config is cleared and that
-- has no jobs leaves no entry.
-- ARGV: [1] wake channel, [2] 'config' | 'pause' | 'resume', [3] group key;
--   config: [4] n, then n pairs: field ('wt' weight, 'ma' max_active, 'rm' / 'rp' rate limit
--           starts / period ms), value ('' = back to the queue's default)
--   pause:  [4] how long in ms (-1: until resumed)
-- Reply: config: { weight, max_active, rate max, rate period ms } after the change ('' =
--        unset); pause: the ms until which it is paused; resume: 1 when it was paused, else 0.
local op, g = ARGV[2], ARGV[3]
local now = now_ms()
-- Paused until ResumeGroup: the end of year 9999, ms.
local FOREVER = 253402300799000

-- The group is eligible again (if it has waiting jobs) and the lease loops are woken: the
-- lease checks its limits anew.
local function recheck()
  if not redis.call('ZSCORE', K_GCOUNT, g) then return end
  local pu = tonumber(redis.call('ZSCORE', K_GPAUSE, g))
  if pu and pu > now then return end
  redis.call('ZREM', K_GBLOCKED, g)
  redis.call('ZADD', K_GREADY, 'NX', num(group_virtual_time()), g)
  redis.call(WAKE_CMD, WAKE, '1')
end

if op == 'config' then
  for i = 1, tonumber(ARGV[4]) do
    local f, v = ARGV[3 + i * 2], ARGV[4 + i * 2]
    if v == '' then
      redis.call('HDEL', K_GCONF, f .. ':' .. g)
    else
      redis.call('HSET', K_GCONF, f .. ':' .. g, v)
    end
  end
  recheck()
  local c = redis.call('HMGET', K_GCONF, 'wt:' .. g, 'ma:' .. g, 'rm:' .. g, 'rp:' .. g)
  for i = 1, 4 do c[i] = c[i] or '' end
  return c
elseif op == 'pause' then
  local d = tonumber(ARGV[4])
  local until_ms = FOREVER
  if d >= 0 then until_ms = now + d end
  pause_group(g, until_ms, true)
  return int(tonumber(redis.call('ZSCORE', K_GPAUSE, g)))
end
local was = redis.call('ZSCORE', K_GPAUSE, g)
resume_group(g)
recheck()
if was and tonumber(was) > now then return 1 end
return 0

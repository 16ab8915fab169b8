-- groups_read.lua: reads the groups of a queue (groups.lua describes the keys): one group,
-- or a page of them, most waiting jobs first. Read-only (the no-writes flag, put first by
-- src/store/scripts.rs).
-- The listing is one ordered sequence: the groups with waiting jobs by waiting jobs, most
-- first (the default group '' among them by its own count; named groups of equal count in
-- reverse byte order, as ZRANGE REV gives them), then the groups with leased jobs only, by
-- key (the default group first). A page token is that sequence's offset: 'w<n>' in the
-- first part, 'a<n>' in the second. Groups that gain or lose jobs between pages may move:
-- a listing is a snapshot per page, not across pages.
-- ARGV: [1] wake channel (unused), [2] 'get' | 'list';
--   get:  [3] group key ('' = the default group)
--   list: [3] page token ('' = the start), [4] page size
-- Reply: { next page token ('' = no more), groups with waiting jobs, then 8 values per group:
--          key, waiting, active, weight, max_active, rate max, rate period ms (own config,
--          '' = unset), paused until ms (-1 = not paused) }
local now = now_ms()
local default_waiting = redis.call('LLEN', K_WAITING) + redis.call('ZCARD', K_PRIO)
local default_active = redis.call('ZCARD', K_ACTIVE) - (tonumber(redis.call('HGET', K_GROUPS, '')) or 0)
local named_waiting = redis.call('ZCARD', K_GCOUNT)
local groups_waiting = named_waiting
if default_waiting > 0 then groups_waiting = groups_waiting + 1 end
local out = { '', groups_waiting }

local function row(g, waiting)
  if g == '' then
    out[#out + 1] = ''
    out[#out + 1] = default_waiting
    out[#out + 1] = default_active
    for _ = 1, 4 do out[#out + 1] = '' end
    out[#out + 1] = -1
    return
  end
  waiting = waiting or tonumber(redis.call('ZSCORE', K_GCOUNT, g)) or 0
  out[#out + 1] = g
  out[#out + 1] = waiting
  out[#out + 1] = tonumber(redis.call('HGET', K_GROUPS, g)) or 0
  local c = redis.call('HMGET', K_GCONF, 'wt:' .. g, 'ma:' .. g, 'rm:' .. g, 'rp:' .. g)
  for i = 1, 4 do out[#out + 1] = c[i] or '' end
  local pu = tonumber(redis.call('ZSCORE', K_GPAUSE, g))
  if pu and pu > now then out[#out + 1] = int(pu) else out[#out + 1] = -1 end
end

if ARGV[2] == 'get' then
  row(ARGV[3])
  return out
end

local token, size = ARGV[3], tonumber(ARGV[4])
local part, offset = 'w', 0
if token ~= '' then part, offset = string.sub(token, 1, 1), tonumber(string.sub(token, 2)) end
local taken = 0
if part == 'w' then
  -- The default group's place among the named groups: after those with more waiting.
  local place = -1
  if default_waiting > 0 then place = redis.call('ZCOUNT', K_GCOUNT, '(' .. default_waiting, '+inf') end
  local total = named_waiting
  if place >= 0 then total = total + 1 end
  local last = math.min(offset + size, total) - 1
  if offset <= last then
    -- Named ranks offset .. last, shifted by one past the default group's place.
    local lo, hi = offset, last
    if place >= 0 and place < offset then lo = lo - 1 end
    if place >= 0 and place <= last then hi = hi - 1 end
    local named = {}
    if lo <= hi then named = redis.call('ZRANGE', K_GCOUNT, lo, hi, 'REV', 'WITHSCORES') end
    local k = 1
    for i = offset, last do
      if i == place then
        row('')
      else
        row(named[k], tonumber(named[k + 1]))
        k = k + 2
      end
      taken = taken + 1
    end
  end
  if offset + taken < total then
    out[1] = 'w' .. (offset + taken)
    return out
  end
  part, offset = 'a', 0
end
-- The groups with leased jobs only.
local only = {}
if default_waiting == 0 and default_active > 0 then only[1] = '' end
local named = {}
local fields = redis.call('HKEYS', K_GROUPS)
for _, g in ipairs(fields) do
  if g ~= '' and not redis.call('ZSCORE', K_GCOUNT, g) then named[#named + 1] = g end
end
table.sort(named)
for _, g in ipairs(named) do only[#only + 1] = g end
local i = offset + 1
while i <= #only and taken < size do
  row(only[i], 0)
  taken = taken + 1
  i = i + 1
end
if i <= #only then out[1] = 'a' .. (i - 1) end
return out

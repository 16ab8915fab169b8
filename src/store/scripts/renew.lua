-- renew.lua: pushes the deadlines of leases whose token still matches to now + lease ms,
-- capped by each attempt's timeout deadline. Used for the batched renewal of live streams'
-- leases and for ExtendLease.
-- ARGV: [1] wake channel, [2] lease ms, [3] n, then per job: id, lease token.
-- Reply: per job { 'OK', deadline } | { 'NOT_FOUND' } | { 'LEASE_LOST', state }.
local now = now_ms()
local lease_ms, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for j = 0, n - 1 do
  local id, token = ARGV[4 + j * 2], ARGV[5 + j * 2]
  local jk = job_key(id)
  local f = redis.call('HMGET', jk, 'st', 'tok', 'ad')
  if not f[1] then
    out[#out + 1] = { 'NOT_FOUND' }
  elseif f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = { 'LEASE_LOST', f[1] }
  else
    local deadline = now + lease_ms
    local ad = tonumber(f[3]) or 0
    if ad > 0 and ad < deadline then deadline = ad end
    redis.call('ZADD', K_ACTIVE, deadline, id)
    out[#out + 1] = { 'OK', deadline }
  end
end
return out

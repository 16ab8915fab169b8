-- ack.lua: completes leased jobs whose lease token matches; trims completed per retention.
-- ARGV: [1] wake channel, [2] n, then per job: id, lease token.
-- Reply: per job { 'OK', lease ms, name, now ms } | { 'NOT_FOUND' } | { 'LEASE_LOST', state }.
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {}
local done = 0
for j = 0, n - 1 do
  local id, token = ARGV[3 + j * 2], ARGV[4 + j * 2]
  local jk = job_key(id)
  local f = redis.call('HMGET', jk, 'st', 'tok', 'lt', 'n')
  if not f[1] then
    out[#out + 1] = { 'NOT_FOUND' }
  elseif f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = { 'LEASE_LOST', f[1] }
  else
    redis.call('ZREM', K_ACTIVE, id)
    redis.call('HDEL', jk, 'tok', 'ad')
    redis.call('HSET', jk, 'st', 'completed', 'ft', now)
    redis.call('ZADD', K_COMPLETED, now, id)
    out[#out + 1] = { 'OK', tonumber(f[3]) or now, f[4] or '', now }
    done = done + 1
  end
end
if done > 0 then
  trim_completed(now, done)
  wake_if_concurrency_limited()
end
return out

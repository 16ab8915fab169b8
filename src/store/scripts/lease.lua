-- lease.lua: promotes due delayed jobs, then leases up to n waiting jobs (highest priority,
-- then FIFO), each under its own lease token and deadline.
-- ARGV: [1] wake channel, [2] n, [3] lease ms, [4] token prefix (random per call; the
--       token of the i-th job is prefix .. i), [5 .. 4+n] worker id of each slot.
-- Reply: { now_ms, next delayed due ms or -1, paused 0|1, per leased job:
--          { id, attempt, token, deadline, n, p, ct, md, pri, max, bo, to, err, c0, rt, ik, rp } }
local now = now_ms()
local n, lease_ms, prefix = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
promote_due(now, 1000)
local out = { now, next_score(K_DELAYED), 0 }
if redis.call('HGET', K_META, 'paused') == '1' then
  out[3] = 1
  return out
end
local popped = redis.call('ZPOPMIN', K_WAITING, n)
local slot = 0
for i = 1, #popped, 2 do
  local id = popped[i]
  local jk = job_key(id)
  redis.call('ZREM', K_READY, id)
  if redis.call('EXISTS', jk) == 1 then
    slot = slot + 1
    local att = redis.call('HINCRBY', jk, 'att', 1)
    local token = prefix .. slot
    local deadline = now + lease_ms
    local f = redis.call('HMGET', jk, 'n', 'p', 'ct', 'md', 'pri', 'max', 'bo', 'to', 'err', 'c0', 'rt', 'ik', 'rp')
    local timeout = tonumber(f[8]) or 0
    if timeout > 0 then
      redis.call('HSET', jk, 'ad', now + timeout)
      if now + timeout < deadline then deadline = now + timeout end
    end
    redis.call('HSET', jk, 'st', 'active', 'tok', token, 'lt', now, 'wk', ARGV[4 + slot])
    redis.call('ZADD', K_ACTIVE, deadline, id)
    out[#out + 1] = { id, att, token, deadline, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9] or '',
      f[10], f[11], f[12], f[13] }
  end
end
return out

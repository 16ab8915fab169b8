-- lease.lua: promotes due delayed jobs, then leases up to n waiting jobs (highest priority,
-- then FIFO), each under its own lease token and deadline, within the queue's limits:
-- paused leases nothing; a worker-reported throttle (throttle_until) leases nothing until
-- then; max_active caps the leased jobs; the rate limit allows at most rate_max starts in
-- any window of rate_ms (a sliding window over the limiter set of start times).
-- ARGV: [1] wake channel, [2] n, [3] lease ms, [4] token prefix (random per call; the
--       token of the i-th job is prefix .. i), [5 .. 4+n] worker id of each slot.
-- Reply: { now_ms, next delayed due ms or -1, paused 0|1,
--          limited ('' | 'rate' | 'throttle' | 'concurrency': jobs were left waiting because
--          of that limit), wait until ms (when the limit next admits a start; -1 unknown),
--          per leased job:
--          { id, attempt, token, deadline, n, p, ct, md, pri, max, bo, to, err, c0, rt, rp } }
local now = now_ms()
local n, lease_ms, prefix = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
promote_due(now, 1000)
local out = { now, next_score(K_DELAYED), 0, '', -1 }
local m = redis.call('HMGET', K_META, 'paused', 'throttle_until', 'max_active', 'rate_max', 'rate_ms')
if m[1] == '1' then
  out[3] = 1
  return out
end
local waiting = redis.call('ZCARD', K_WAITING)
if waiting == 0 then return out end
local throttle_until = tonumber(m[2]) or 0
if throttle_until > now then
  out[4], out[5] = 'throttle', throttle_until
  return out
end
local allowed = n
local limited_by = 'rate'
local rate_max, rate_ms = tonumber(m[4]), tonumber(m[5])
if rate_max and rate_ms then
  redis.call('ZREMRANGEBYSCORE', K_LIMITER, '-inf', now - rate_ms)
  local free = rate_max - redis.call('ZCARD', K_LIMITER)
  if free < allowed then allowed = free end
end
local max_active = tonumber(m[3])
if max_active then
  local free = max_active - redis.call('ZCARD', K_ACTIVE)
  if free < allowed then allowed, limited_by = free, 'concurrency' end
end
if allowed < n and allowed < waiting then
  out[4] = limited_by
  if limited_by == 'rate' then
    local oldest = redis.call('ZRANGE', K_LIMITER, 0, 0, 'WITHSCORES')
    if oldest[2] then out[5] = tonumber(oldest[2]) + rate_ms end
    if allowed > 0 and out[5] == -1 then out[5] = now + rate_ms end
  end
end
if allowed <= 0 then return out end
local popped = redis.call('ZPOPMIN', K_WAITING, allowed)
local slot = 0
for i = 1, #popped, 2 do
  local id = popped[i]
  local jk = job_key(id)
  -- One read per job: 'n' is always set, so a missing name means the hash is gone.
  local f = redis.call('HMGET', jk, 'n', 'p', 'ct', 'md', 'pri', 'max', 'bo', 'to', 'err', 'c0', 'rt', 'rp', 'att')
  if f[1] then
    slot = slot + 1
    local att = (tonumber(f[13]) or 0) + 1
    local token = prefix .. slot
    local deadline = now + lease_ms
    local timeout = tonumber(f[8]) or 0
    if timeout > 0 then
      if now + timeout < deadline then deadline = now + timeout end
      redis.call('HSET', jk, 'st', 'active', 'tok', token, 'lt', now, 'wk', ARGV[4 + slot], 'att', att,
        'ad', now + timeout)
    else
      redis.call('HSET', jk, 'st', 'active', 'tok', token, 'lt', now, 'wk', ARGV[4 + slot], 'att', att)
    end
    redis.call('ZADD', K_ACTIVE, deadline, id)
    if rate_max and rate_ms then redis.call('ZADD', K_LIMITER, now, token) end
    -- Fields a job was created without (defaults) read as ''.
    out[#out + 1] = { id, att, token, deadline, f[1], f[2], f[3] or '', f[4] or '', f[5], f[6], f[7] or '',
      f[8] or '', f[9] or '', f[10], f[11], f[12] or '' }
  end
end
return out

-- lease.lua: promotes due delayed jobs, then leases up to n waiting jobs (highest priority,
-- then FIFO), each under its own lease token and deadline, within the queue's limits:
-- paused leases nothing; a worker-reported throttle (throttle_until) leases nothing until
-- then; max_active caps the leased jobs; the rate limit allows at most rate_max starts in
-- any window of rate_ms (a sliding window over the limiter set of start times).
-- Every call has an id (random, made by the server); the lease token of slot i is
-- '<call id>-<i>'. A call that leases jobs records them as unconfirmed until the server
-- confirms it got the reply; a call released before it ran leases nothing (common.lua,
-- "Lost lease replies"). The call first confirms the earlier calls it lists.
-- ARGV: [1] wake channel, [2] n, [3] lease ms, [4] call id, [5] c, [6 .. 5+c] ids of
--       earlier calls whose replies arrived, [6+c .. 5+c+n] worker id of each slot.
-- Reply: { now_ms, next delayed due ms or -1, paused 0|1,
--          limited ('' | 'rate' | 'throttle' | 'concurrency': jobs were left waiting because
--          of that limit), wait until ms (when the limit next admits a start; -1 unknown),
--          more 0|1 (1: the call's byte budget ran out with jobs still waiting, common.lua:
--          call again at once),
--          then three values per leased job: id, deadline, record (the header as
--          saved, then the body); the i-th job leased has the i-th token (flat: no table
--          a job) }
local now = now_ms()
local n, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local call, c = ARGV[4], tonumber(ARGV[5])
local workers = 5 + c
if c > 0 then confirm_calls({ unpack(ARGV, 6, 5 + c) }) end
promote_due(now, 1000)
local out = { now, next_score(K_DELAYED), 0, '', -1, 0 }
-- Released before it ran (its reply was given up on): lease nothing.
if redis.call('HEXISTS', K_CALL_JOBS, call) == 1 then return out end
local m = redis.call('HMGET', K_META, 'paused', 'throttle_until', 'max_active', 'rate_max', 'rate_ms')
if m[1] == '1' then
  out[3] = 1
  return out
end
if redis.call('EXISTS', K_WAITING, K_PRIO) == 0 then return out end
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
if allowed < n and allowed < waiting_count() then
  out[4] = limited_by
  if limited_by == 'rate' then
    local oldest = redis.call('ZRANGE', K_LIMITER, 0, 0, 'WITHSCORES')
    if oldest[2] then out[5] = tonumber(oldest[2]) + rate_ms end
    if allowed > 0 and out[5] == -1 then out[5] = now + rate_ms end
  end
end
if allowed <= 0 then return out end
local slot = 0
-- Numbers passed to redis.call are formatted with sprintf (about 1 µs each): the common
-- deadline is formatted once.
local deadline = now + lease_ms
local deadline_s = int(deadline)
local active = {}
local leased = {}
local popped, scores = pop_ready(allowed)
for i, id in ipairs(popped) do
  -- Past the byte budget (common.lua): the popped jobs not reached go back where they
  -- were, and the reply says more are waiting.
  if slot > 0 and over_budget() then
    unpop_ready(popped, scores, i)
    out[6] = 1
    break
  end
  local hdr = get_header(id)
  -- Only the lease part is decoded and written anew; the rest of the header is copied as
  -- it is, and the body only read for the reply.
  local off, st, att, to, name
  if hdr then off, st, att, to, name = cmsgpack.unpack_limit(hdr, LEASE_VALUES, 0) end
  -- A waiting entry whose job is gone or has moved on (never expected) is dropped.
  if st == 'waiting' then
    slot = slot + 1
    local token = call .. '-' .. slot
    local due, due_s, ad = deadline, deadline_s, 0
    if to > 0 then
      ad = now + to
      if ad < deadline then due, due_s = ad, int(ad) end
    end
    hdr = cmsgpack.pack('active', att + 1, to, name, now, token, ARGV[workers + slot], ad) .. string.sub(hdr, off + 1)
    redis.call('HSET', K_JOBS, id, hdr)
    active[#active + 1] = due_s
    active[#active + 1] = id
    if rate_max and rate_ms then redis.call('ZADD', K_LIMITER, now, token) end
    leased[slot] = id
    push3(out, id, due, hdr .. get_body(id))
  end
end
if slot > 0 then
  redis.call('ZADD', K_ACTIVE, unpack(active))
  redis.call('ZADD', K_CALLS, deadline_s, call)
  redis.call('HSET', K_CALL_JOBS, call, cmsgpack.pack(leased))
end
return out

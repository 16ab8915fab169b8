-- reap.lua: fails leases whose deadline passed (the worker died, hung, or lost its stream)
-- and attempts that outlived the job's timeout, as failed attempts that follow the retry
-- policy; the last one dead-letters the job with reason LEASE_EXPIRED or TIMED_OUT. Also
-- promotes due delayed jobs, so a queue with no worker still moves, and applies the
-- completed and dead retention (count and age), so age limits hold with no traffic, and
-- drops the groups' pauses and rate-window entries past their time (groups.lua).
-- Idempotent: every replica runs it (on the queues the due index says are due).
-- Leases of a lease call whose reply was never confirmed are released, not failed: no
-- worker received them (attempts.lua, "Lost lease replies"), but only once the call is
-- `lost_after` ms old, and only those whose own deadline has passed (reap_call); an expired
-- lease of a younger unconfirmed call is looked at again when the call is twice as old (at
-- least CONFIRM_STEP_MS later, at the latest when it is old enough: a few looks, not a
-- spin), by which time its call is confirmed (a failed attempt then) or lost. Calls whose
-- record comes due (K_CALLS: their deadline, or when a lease of theirs may next go back)
-- are reaped the same way; tombstones past their time are dropped.
-- Cancel and expiry (attempts.lua): a lease whose cancel is pending ends CANCELLED at its
-- deadline (the revoke time, or earlier), not as a failed attempt; up to the max leases of
-- due entries of K_EXPIRY expire (EXPIRED, or DEAD with reason EXPIRED); the cancelled and
-- expired sets are trimmed by the completed retention.
-- ARGV: [1] wake channel, [2] max leases to reap, [3] lost_after: how old (ms) an
--       unconfirmed lease call must be to be taken for lost, [4 ..] a random in [0, 1) per
--       lease.
-- Reply: { promoted, next active deadline or -1, next delayed due or expire time or -1,
--          next retention due or -1 (now when the budget ran out: call again),
--          completed jobs trimmed, dead jobs trimmed (by this call and by the ack and fail
--          calls since the last reap: the meta counters are collected and reset),
--          more (1: the call's byte budget ran out before the expired leases did: call
--          again; common.lua), jobs expired by this call (retries past their expire time
--          included), per reaped job: { id, name, error type ('CANCELLED' for a revoked lease),
--          state, dead reason, attempt } }
local RETENTION_BUDGET = 1000
-- The least wait before a young unconfirmed call's lease is looked at again: the
-- confirmation delay (CONFIRM_DELAY in src/lease/queue_loop.rs).
local CONFIRM_STEP_MS = 20
local now = now_ms()
local limit = tonumber(ARGV[2])
local lost_after = tonumber(ARGV[3])
local promoted = promote_due(now, 1000)
if promoted > 0 then redis.call(WAKE_CMD, WAKE, '1') end
local out = { promoted, -1, -1, -1, 0, 0, 0, 0 }
local any_waiting = false
for _, call in ipairs(redis.call('ZRANGE', K_CALLS, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)) do
  if over_budget() then out[7] = 1; break end
  if reap_call(call, now, lost_after) > 0 then any_waiting = true end
end
local retried_expired = 0
local expired = redis.call('ZRANGE', K_ACTIVE, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
for i, id in ipairs(expired) do
  -- Past the byte budget (common.lua): the rest wait for the next call.
  if over_budget() then out[7] = 1; break end
  local h = load_job(id)
  local call = h and h[ST] == 'active' and call_of(h[TOK])
  if not h or h[ST] ~= 'active' then
    redis.call('ZREM', K_ACTIVE, id)
  elseif unconfirmed(call) and h[LT] + lost_after > now then
    -- Its call is too young to be taken for lost (its confirmation may be on its way):
    -- neither released nor failed; looked at again later.
    local again = math.min(h[LT] + lost_after, now + math.max(now - h[LT], CONFIRM_STEP_MS))
    redis.call('ZADD', K_ACTIVE, int(again), id)
  elseif unconfirmed(call) then
    -- Its call is lost: released, uncharged, with the call's other leases that expired.
    if reap_call(call, now, lost_after) > 0 then any_waiting = true end
  elseif h[CX] > 0 then
    -- A cancel is pending and the holder did not settle in time: revoked, CANCELLED.
    local name, att = h[NAME], h[ATT]
    cancel_active(id, h, now)
    trim_finished(K_CANCELLED, now, 1)
    out[#out + 1] = { id, name, 'CANCELLED', 'cancelled', '', att }
  else
    local etype, message = 'LEASE_EXPIRED', 'lease expired before the job was acked'
    if h[AD] > 0 and now >= h[AD] then
      etype, message = 'TIMED_OUT', 'attempt ran past the job timeout'
    end
    local name, att = h[NAME], h[ATT]
    local r = fail_attempt(id, h, now, 'RETRY', etype, message, etype, '', -1, tonumber(ARGV[3 + i]) or 0)
    if r[1] == 'waiting' then any_waiting = true end
    if r[1] == 'expired' or r[3] == 'EXPIRED' then retried_expired = retried_expired + 1 end
    out[#out + 1] = { id, name, etype, r[1], r[3], att }
  end
end
if #expired > 0 or any_waiting then wake_after_failures(any_waiting) end

-- Expiry: waiting and delayed jobs past their expire time, a bounded batch per call.
local expiring = redis.call('ZRANGE', K_EXPIRY, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
local expired_n, expired_dead = 0, false
for _, id in ipairs(expiring) do
  if over_budget() then out[7] = 1; break end
  local h = load_job(id)
  if h and (h[ST] == 'waiting' or h[ST] == 'delayed') then
    if h[ST] == 'waiting' then
      remove_waiting(id, h)
    else
      redis.call('ZREM', K_DELAYED, id)
    end
    if expire_job(id, h, now) == 'dead' then expired_dead = true end
    expired_n = expired_n + 1
  else
    redis.call('ZREM', K_EXPIRY, id)
  end
end
if #expiring >= limit then out[7] = 1 end
-- The retries that ended EXPIRED above (fail_attempt trimmed for them) count too.
out[8] = expired_n + retried_expired
if expired_n > 0 then
  trim_finished(K_EXPIRED, now, expired_n)
  if expired_dead then trim_dead(now) end
end

out[2] = next_score(K_ACTIVE)
out[3] = next_score(K_DELAYED)
local next_expiry = next_score(K_EXPIRY)
if next_expiry >= 0 and (out[3] < 0 or next_expiry < out[3]) then out[3] = next_expiry end

-- Retention: the earliest time an entry left in a set passes its age limit is the set's
-- next due time.
local retention_due = -1
local function due_at(t)
  if retention_due < 0 or t < retention_due then retention_due = t end
end
local keep_c, age_c = completed_retention()
if trim(K_COMPLETED, keep_c, age_c, now, RETENTION_BUDGET, 1) >= RETENTION_BUDGET then
  due_at(now)
elseif age_c > 0 then
  local first = next_score(K_COMPLETED)
  if first >= 0 then due_at(first + age_c) end
end
for _, key in ipairs({ K_CANCELLED, K_EXPIRED }) do
  if trim(key, keep_c, age_c, now, RETENTION_BUDGET, 1) >= RETENTION_BUDGET then
    due_at(now)
  elseif age_c > 0 then
    local first = next_score(key)
    if first >= 0 then due_at(first + age_c) end
  end
end
local keep_d, age_d = dead_retention()
if trim(K_DEAD, keep_d, age_d, now, RETENTION_BUDGET, DEAD_SCALE) >= RETENTION_BUDGET then
  due_at(now)
elseif age_d > 0 then
  local first = next_score(K_DEAD)
  if first >= 0 then due_at(math.floor(first / DEAD_SCALE) + age_d) end
end
-- The groups' pauses past their time and rate-window entries past their window
-- (groups.lua), so an idle group's entries go.
local groups_due = trim_groups(now, RETENTION_BUDGET)
if groups_due >= 0 then due_at(groups_due) end
out[4] = retention_due
local counted = redis.call('HMGET', K_META, 'trimmed_completed', 'trimmed_dead')
if counted[1] or counted[2] then
  redis.call('HDEL', K_META, 'trimmed_completed', 'trimmed_dead')
  out[5], out[6] = tonumber(counted[1]) or 0, tonumber(counted[2]) or 0
end
return out

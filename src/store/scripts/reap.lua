-- reap.lua: fails leases whose deadline passed (the worker died, hung, or lost its stream)
-- and attempts that outlived the job's timeout, as failed attempts that follow the retry
-- policy; the last one dead-letters the job with reason LEASE_EXPIRED or TIMED_OUT. Also
-- promotes due delayed jobs, so a queue with no worker still moves. Idempotent: every
-- replica runs it.
-- ARGV: [1] wake channel, [2] max leases to reap, [3 ..] a random in [0, 1) per lease.
-- Reply: { promoted, next active deadline or -1, next delayed due or -1,
--          per reaped job: { id, name, error type, state, dead reason, attempt } }
local now = now_ms()
local limit = tonumber(ARGV[2])
local promoted = promote_due(now, 1000)
if promoted > 0 then redis.call('PUBLISH', WAKE, '1') end
local out = { promoted, -1, -1 }
local expired = redis.call('ZRANGE', K_ACTIVE, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
local any_waiting = false
for i, id in ipairs(expired) do
  local jk = job_key(id)
  local h, body = load_job(jk)
  if not h or h[ST] ~= 'active' then
    redis.call('ZREM', K_ACTIVE, id)
  else
    local etype, message = 'LEASE_EXPIRED', 'lease expired before the job was acked'
    if h[AD] > 0 and now >= h[AD] then
      etype, message = 'TIMED_OUT', 'attempt ran past the job timeout'
    end
    local name, att = h[NAME], h[ATT]
    local r = fail_attempt(id, jk, h, body, now, 'RETRY', etype, message, etype, '', -1, tonumber(ARGV[2 + i]) or 0)
    if r[1] == 'waiting' then any_waiting = true end
    out[#out + 1] = { id, name, etype, r[1], r[3], att }
  end
end
if #expired > 0 then wake_after_failures(any_waiting) end
out[2] = next_score(K_ACTIVE)
out[3] = next_score(K_DELAYED)
return out

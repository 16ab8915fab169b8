-- fail.lua: fails the current attempt of leased jobs whose lease token matches: retry with
-- backoff, return without consuming the attempt (RATE_LIMITED), or dead-letter, atomically.
-- ARGV: [1] wake channel, [2] n, then 8 per job: id, lease token, disposition
--       (RETRY|NO_RETRY|RATE_LIMITED), message, error type, details, retry_after ms (-1 =
--       none), random in [0, 1) for jitter.
-- Reply: per job { 'OK', state, ready-or-dead ms, dead reason, lease ms, name, attempt, now ms }
--        | { 'NOT_FOUND' }
--        | { 'LEASE_LOST', state }.
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {}
for j = 0, n - 1 do
  local b = 3 + j * 8
  local id, token = ARGV[b], ARGV[b + 1]
  local jk = job_key(id)
  local f = redis.call('HMGET', jk, 'st', 'tok', 'lt', 'n', 'att')
  if not f[1] then
    out[#out + 1] = { 'NOT_FOUND' }
  elseif f[1] ~= 'active' or f[2] ~= token then
    out[#out + 1] = { 'LEASE_LOST', f[1] }
  else
    local r = fail_attempt(id, jk, now, ARGV[b + 2], 'ATTEMPTS_EXHAUSTED', ARGV[b + 3], ARGV[b + 4],
      ARGV[b + 5], tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7]))
    out[#out + 1] = { 'OK', r[1], r[2], r[3], tonumber(f[3]) or now, f[4] or '', tonumber(f[5]) or 0, now }
  end
end
return out

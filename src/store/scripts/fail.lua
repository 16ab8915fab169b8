-- fail.lua: fails the current attempt of leased jobs whose lease token matches: retry with
-- backoff, return without consuming the attempt (RATE_LIMITED, after a delay; RELEASE, at
-- once and with no error recorded: a worker shutting down), or dead-letter, atomically.
-- With RATE_LIMITED and the pause flags, the whole queue (1) and/or the job's group (2:
-- a named group, groups.lua; ignored for the default group) leases nothing until now + the
-- return delay (meta throttle_until, gpause; on every replica).
-- ARGV: [1] wake channel, [2] n, then 9 per job: id, lease token, disposition
--       (RETRY|NO_RETRY|RATE_LIMITED|RELEASE), message, error type, details, retry_after ms (-1 =
--       none), random in [0, 1) for jitter, pause flags (0-3: 1 the queue, 2 the group).
-- A fail repeated with the token of a fail already applied (its reply was lost) answers
-- 'DONE' with the first one's outcome and changes nothing (attempts.lua, "Repeated settles"),
-- also when both are in this call.
-- A retry past the job's expire time ends it 'expired' (or 'dead', reason EXPIRED) instead
-- (attempts.lua, "Cancel and expiry").
-- Reply (for the first jobs only when the call's byte budget ran out: common.lua): per job { 'OK', state, ready-or-dead ms, dead reason, lease ms, name, attempt, now ms }
--        | { 'DONE', state, ready-or-dead ms, dead reason, 0, '', 0, now ms }
--        | { 'NOT_FOUND' }
--        | { 'LEASE_LOST', state }.
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {}
local any_waiting = false
local remembered = {}
-- This call's applied fails by token: a repeat within the call answers as one in a later
-- call would (remember_settled writes the settle memory only at the end).
local applied = {}
for j = 0, n - 1 do
  -- Past the byte budget (common.lua) the reply is short: the server sends the rest again.
  if j > 0 and over_budget() then break end
  local b = 3 + j * 9
  local id, token = ARGV[b], ARGV[b + 1]
  local rec, refusal = leased_record(id, token)
  local earlier = not rec and (applied[token] or settled_outcome(token))
  if earlier and string.sub(earlier, 1, 2) == 'F,' then
    local st, at, reason = string.match(earlier, '^F,(%a+),(%d+),([%u_]*)$')
    out[#out + 1] = { 'DONE', st, tonumber(at), reason, 0, '', 0, now }
  elseif not rec then
    out[#out + 1] = refusal
  else
    local h = split_header(rec)
    local lt, name, att = h[LT], h[NAME], h[ATT]
    local r
    if ARGV[b + 2] == 'RELEASE' then
      -- The worker stops before its handler finished: back to waiting uncharged, no error
      -- recorded, as the server's drain hands leases back (release.lua); a pending cancel
      -- ends it CANCELLED.
      r = hand_back(id, h, now) and { 'waiting', now, '' } or { 'cancelled', now, '' }
    else
      r = fail_attempt(id, h, now, ARGV[b + 2], 'ATTEMPTS_EXHAUSTED', ARGV[b + 3],
        ARGV[b + 4], ARGV[b + 5], tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7]))
    end
    local pause = tonumber(ARGV[b + 8]) or 0
    if ARGV[b + 2] == 'RATE_LIMITED' and pause % 2 == 1 then
      local until_ms = tonumber(r[2])
      if until_ms > (tonumber(redis.call('HGET', K_META, 'throttle_until')) or 0) then
        redis.call('HSET', K_META, 'throttle_until', until_ms)
      end
    end
    if ARGV[b + 2] == 'RATE_LIMITED' and pause >= 2 and h[GRP] ~= '' then
      pause_group(h[GRP], tonumber(r[2]))
    end
    if r[1] == 'waiting' then any_waiting = true end
    applied[token] = 'F,' .. r[1] .. ',' .. int(r[2]) .. ',' .. r[3]
    remembered[#remembered + 1] = token
    remembered[#remembered + 1] = applied[token]
    out[#out + 1] = { 'OK', r[1], r[2], r[3], lt, name, att, now }
  end
end
remember_settled(remembered, now)
wake_after_failures(any_waiting)
return out

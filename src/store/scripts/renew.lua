-- renew.lua: pushes the deadlines of leases whose token still matches to now + lease ms,
-- capped by each attempt's timeout deadline. Used for the batched renewal of live streams'
-- leases and for ExtendLease. Only the job's header is read (HGET, never the body);
-- nothing is written to it. Renewing a lease proves the server got its lease call's reply:
-- that call is confirmed (attempts.lua, "Lost lease replies"), unless the last argument says
-- not to (the server still holds a lease of the call unsent: lease/unsent.rs).
-- ARGV: [1] wake channel, [2] lease ms, [3] n, then per job: id, lease token; then
-- optionally '0': confirm no call.
-- A lease whose cancel is pending (attempts.lua, "Cancel and expiry") is never pushed past
-- its revoke time, and its reply says so, so the server can tell the holder if the
-- wake-up message was lost.
-- Reply: per job { 'OK', deadline[, revoke ms, cancel reason] } | { 'NOT_FOUND' }
--        | { 'LEASE_LOST', state }.
local now = now_ms()
local lease_ms, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
local deadlines = {}
local calls, seen = {}, {}
local default_s = int(now + lease_ms)
for j = 0, n - 1 do
  local id, token = ARGV[4 + j * 2], ARGV[5 + j * 2]
  local rec = get_header(id)
  local refusal = lease_refusal(rec, token)
  if refusal then
    out[#out + 1] = refusal
  else
    local _, _, _, _, ad = lease_fields(rec)
    local deadline, deadline_s = now + lease_ms, default_s
    if ad > 0 and ad < deadline then deadline, deadline_s = ad, int(ad) end
    local revoke, why = cancel_of(id)
    if revoke and revoke > 0 and revoke < deadline then deadline, deadline_s = revoke, int(revoke) end
    deadlines[#deadlines + 1] = deadline_s
    deadlines[#deadlines + 1] = id
    local call = call_of(token)
    if call and not seen[call] then
      seen[call] = true
      calls[#calls + 1] = call
    end
    if revoke and revoke > 0 then
      out[#out + 1] = { 'OK', deadline, revoke, why }
    else
      out[#out + 1] = { 'OK', deadline }
    end
  end
end
for i = 1, #deadlines, 1000 do
  redis.call('ZADD', K_ACTIVE, unpack(deadlines, i, math.min(i + 999, #deadlines)))
end
if ARGV[4 + n * 2] ~= '0' then confirm_calls(calls) end
return out

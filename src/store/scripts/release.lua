-- release.lua: hands leased jobs back to waiting at once without consuming the attempt
-- (orderly shutdown: the job never ran to an outcome through no fault of its own); a job
-- whose cancel is pending ends CANCELLED instead (attempts.lua, "Cancel and expiry").
-- ARGV: [1] wake channel, [2] n, then per job: id, lease token.
-- Reply (for the first jobs only when the call's byte budget ran out: common.lua): per job
-- 1 released | 0 (not found, or the lease moved on).
local now = now_ms()
local n = tonumber(ARGV[2])
local out = {}
local any = false
for j = 0, n - 1 do
  -- Past the byte budget (common.lua) the reply is short: the server sends the rest again.
  if j > 0 and over_budget() then break end
  local id, token = ARGV[3 + j * 2], ARGV[4 + j * 2]
  local rec = leased_record(id, token)
  if rec then
    -- A job whose cancel is pending ends CANCELLED instead (attempts.lua, hand_back).
    if hand_back(id, split_header(rec), now) then any = true end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if any then redis.call(WAKE_CMD, WAKE, '1') end
return out

-- release_call.lua: the reply of lease call ARGV[2] was lost (timeout, dropped connection):
-- hands its leases still active under its tokens back to waiting without consuming the
-- attempt, and leaves a tombstone until now + ARGV[3] ms, so that the call leases nothing if
-- it has not run yet and runs later (attempts.lua, "Lost lease replies"). Idempotent.
-- ARGV: [1] wake channel, [2] call id, [3] tombstone lifetime ms.
-- Reply: how many jobs went back to waiting.
local now = now_ms()
local call = ARGV[2]
local n = release_call(call, now)
redis.call('ZADD', K_CALLS, int(now + tonumber(ARGV[3])), call)
redis.call('HSET', K_CALL_JOBS, call, '')
if n > 0 then redis.call(WAKE_CMD, WAKE, '1') end
return n

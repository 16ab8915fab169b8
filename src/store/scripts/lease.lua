-- lease.lua: leases up to n jobs (lease_jobs, lease_fn.lua) after confirming the earlier
-- calls it lists (their replies arrived: common.lua, "Lost lease replies").
-- ARGV: [1] wake channel, [2] n, [3] lease ms, [4] call id, [5] c, [6 .. 5+c] ids of
--       earlier calls whose replies arrived, [6+c .. 5+c+n] worker id of each slot.
-- Reply: lease_jobs's (lease_fn.lua).
local n, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local call, c = ARGV[4], tonumber(ARGV[5])
if c > 0 then confirm_calls({ unpack(ARGV, 6, 5 + c) }) end
return lease_jobs(n, lease_ms, call, { unpack(ARGV, 6 + c, 5 + c + n) })

-- ack_lease.lua: completes leased jobs (ack_jobs, ack_fn.lua), then leases up to w jobs
-- for the credits those acks freed (lease_jobs, lease_fn.lua), in one call: a worker's
-- stream gets its next job in the round trip of its ack (BullMQ's moveToFinished does the
-- same). The lease part is a lease call like lease.lua's, under its own call id: its reply
-- is lost with the call's, and the server releases it by that id (common.lua, "Lost lease
-- replies"). It runs only when every ack was answered (the byte budget did not run out).
-- ARGV: [1] wake channel, [2] lease ms, [3] call id, [4] c, [5 .. 4+c] ids of earlier
--       lease calls whose replies arrived, [5+c] w, [6+c .. 5+c+w] worker id of each
--       slot, [6+c+w] n, then ack.lua's arguments after its n (from [7+c+w]).
-- Reply: { ack_jobs's reply, lease_jobs's reply (or {} when the acks ran out of budget) }.
local lease_ms, call, c = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if c > 0 then confirm_calls({ unpack(ARGV, 5, 4 + c) }) end
local w = tonumber(ARGV[5 + c])
local n = tonumber(ARGV[6 + c + w])
local acked = ack_jobs(n, 7 + c + w)
if #acked < 1 + 3 * n then return { acked, {} } end
return { acked, lease_jobs(w, lease_ms, call, { unpack(ARGV, 6 + c, 5 + c + w) }, acked[1]) }

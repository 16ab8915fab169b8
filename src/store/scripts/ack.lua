-- ack.lua: completes leased jobs (ack_jobs, ack_fn.lua).
-- ARGV: [1] wake channel, [2] n, then per job: id, lease token; then, when some acks carry
--       a result, [3 + 2n] m, then m pairs: the job's index in the list (0-based), result.
-- Reply: ack_jobs's (ack_fn.lua).
return ack_jobs(tonumber(ARGV[2]), 3)

-- delete_queue.lua: deletes up to a budget of the queue's jobs in any state; once none is
-- left, also its meta (config, pause flag, counters), rate limiter, settled-token record,
-- lease-call records, group records (groups.lua: config, pauses, rate windows) and the ids
-- the server chose (enqueue.lua), and says it is done.
-- Refuses while jobs are leased unless forced (checked before any write, in every call).
-- ARGV: [1] wake channel (unused), [2] force 1|0, [3] most jobs to delete in this call.
-- Reply: { 'BUSY', leased jobs } (nothing deleted)
--      | { 'OK', waiting, delayed, active, completed, dead deleted, done 1|0 }
local force = ARGV[2] == '1'
local budget = tonumber(ARGV[3])
local leased = redis.call('ZCARD', K_ACTIVE)
if leased > 0 and not force then return { 'BUSY', leased } end
local out = { 'OK', 0, 0, 0, 0, 0, 0 }
local left = budget
local waiting = pop_ready(left)
delete_jobs(waiting)
out[2] = #waiting
left = left - #waiting
if left > 0 then
  local grouped = pop_group_waiting(left)
  delete_jobs(grouped)
  out[2] = out[2] + #grouped
  left = left - #grouped
end
-- Cancelled and expired jobs are counted with the completed ones (KEYS 16, 17).
local slots = { 3, 4, 5, 6, 5, 5 }
for i, key in ipairs({ K_DELAYED, K_ACTIVE, K_COMPLETED, K_DEAD, K_CANCELLED, K_EXPIRED }) do
  if left <= 0 then break end
  local ids = redis.call('ZRANGE', key, 0, left - 1)
  if #ids > 0 then
    redis.call('ZREM', key, unpack(ids))
    delete_jobs(ids)
    out[slots[i]] = out[slots[i]] + #ids
    left = left - #ids
  end
end
-- Every step took less than it could: nothing is left.
if left > 0 then
  -- The job hashes are empty by now (every job was deleted); DEL them all the same.
  redis.call('DEL', K_WAITING, K_META, K_JOBS, K_LIMITER, K_SETTLED, K_SETTLED_AT, K_CALLS, K_CALL_JOBS,
    K_BODIES, K_ERRORS, K_PRIO, K_CANCELLED, K_EXPIRED, K_EXPIRY, K_DATA, K_GWAIT, K_GSEQ,
    K_GROUPS, K_GCONF, K_GREADY, K_GBLOCKED, K_GLIMIT, K_GPAUSE,
    K_GCOUNT, K_CREATED)
  out[7] = 1
end
return out

-- purge.lua: deletes up to a budget of the queue's waiting and delayed jobs (and, if asked,
-- completed (with cancelled and expired) and dead ones). Leased jobs are never purged: their workers hold them.
-- ARGV: [1] wake channel (unused), [2] include completed 1|0, [3] include dead 1|0,
--       [4] most jobs to delete in this call.
-- Reply: the number of jobs deleted (less than the budget: nothing is left to purge).
local budget = tonumber(ARGV[4])
local deleted = 0
local waiting = pop_ready(budget)
delete_jobs(waiting)
deleted = #waiting
if deleted < budget then
  local grouped = pop_group_waiting(budget - deleted)
  delete_jobs(grouped)
  deleted = deleted + #grouped
end
local sets = { K_DELAYED }
if ARGV[2] == '1' then
  -- Cancelled and expired jobs go with the completed ones (kept by the same retention).
  sets[#sets + 1] = K_COMPLETED
  sets[#sets + 1] = K_CANCELLED
  sets[#sets + 1] = K_EXPIRED
end
if ARGV[3] == '1' then sets[#sets + 1] = K_DEAD end
for _, key in ipairs(sets) do
  if deleted >= budget then break end
  local ids = redis.call('ZRANGE', key, 0, budget - deleted - 1)
  if #ids > 0 then
    redis.call('ZREM', key, unpack(ids))
    delete_jobs(ids)
    deleted = deleted + #ids
  end
end
return deleted

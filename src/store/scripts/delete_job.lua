-- delete_job.lua: deletes one job in any state but ACTIVE (its holder must settle it, or it
-- must be cancelled first): its header, body, error history and data fields, and its entry
-- in whichever index holds it (waiting, delayed, completed, dead, cancelled, expired,
-- expiry), so that its id is free for a new Enqueue at once. (jobwire keeps no dedupe
-- reservation beside the job itself: a deleted id is free.)
-- ARGV: [1] wake channel (unused), [2] the job's id.
-- Reply: { 'NOT_FOUND' } | { 'ACTIVE' } (nothing deleted) | { 'OK', the state it was in }.
local id = ARGV[2]
local h = load_job(id)
if not h then return { 'NOT_FOUND' } end
local st = h[ST]
if st == 'active' then return { 'ACTIVE' } end
if st == 'waiting' then
  remove_waiting(id, h)
elseif st == 'delayed' then
  redis.call('ZREM', K_DELAYED, id)
elseif st == 'completed' then
  redis.call('ZREM', K_COMPLETED, id)
elseif st == 'dead' then
  redis.call('ZREM', K_DEAD, id)
elseif st == 'cancelled' then
  redis.call('ZREM', K_CANCELLED, id)
elseif st == 'expired' then
  redis.call('ZREM', K_EXPIRED, id)
end
delete_jobs({ id })
return { 'OK', st }

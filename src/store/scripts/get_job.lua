-- get_job.lua: a job's record and its error history as of one moment. Read-only (the
-- no-writes flag, put first by src/store/scripts.rs), so it also runs on a Redis past
-- maxmemory, where MULTI is refused.
-- ARGV: [1] wake channel (unused), [2] the job's id.
-- Reply: { record (header .. body) or nil, history { field, value, ... } (read_history),
--          data { progress entry, checkpoint, result, cancel ('<revoke ms>,<reason>') }
--          (the job's fields of the data hash, common.lua; nil each when absent), lease
--          deadline (its active score) or nil }.
local id = ARGV[2]
local rec = get_record(id)
if not rec then return { false, {} } end
local data = redis.call('HMGET', K_DATA, 'p:' .. id, 'c:' .. id, 'r:' .. id, 'x:' .. id)
return { rec, read_history(id), data, redis.call('ZSCORE', K_ACTIVE, id) }

-- get_job.lua: a job's record and its error history as of one moment. Read-only (the
-- no-writes flag, put first by src/store/scripts.rs), so it also runs on a Redis past
-- maxmemory, where MULTI is refused.
-- ARGV: [1] wake channel (unused), [2] the job's id.
-- Reply: { record (header .. body) or nil, history { field, value, ... } (read_history) }.
local id = ARGV[2]
local rec = get_record(id)
if not rec then return { false, {} } end
return { rec, read_history(id) }

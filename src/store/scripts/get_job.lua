#!lua flags=no-writes
-- get_job.lua: a job's record and its error history as of one moment. Read-only (the
-- no-writes flag), so it also runs on a Redis past maxmemory, where MULTI is refused.
-- KEYS: [1] the job's record, [2] its error history (hash). Both share the queue's hash tag.
-- Reply: { record or nil, { field, value, ... } }.
return { redis.call('GET', KEYS[1]), redis.call('HGETALL', KEYS[2]) }

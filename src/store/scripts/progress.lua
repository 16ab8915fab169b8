-- progress.lua: saves the progress and/or checkpoint of a leased job whose lease token
-- matches, fenced like ack.lua (a stale token changes nothing). The progress entry
-- 'p:<id>' of the data hash (common.lua, KEYS 19) is the MessagePack array [percent,
-- message, ms]: each report rewrites it with the time of the report, keeping the last
-- percent and message where the report sets none. The checkpoint 'c:<id>' is replaced
-- when the report sets one; an empty one deletes it. Both are kept across attempts (the
-- next attempt's lease carries the checkpoint: lease.lua) and across a replay from the
-- dead-letter queue; deleting the job deletes them (delete_jobs).
-- ARGV: [1] wake channel (unused), [2] id, [3] lease token, [4] the fields set, any of
--       'p' (percent), 'm' (message), 'c' (checkpoint), [5] percent (0-100), [6] message,
--       [7] checkpoint bytes.
-- Reply: { { 'OK', now ms } | { 'NOT_FOUND' } | { 'LEASE_LOST', state } } (one settle item).
local now = now_ms()
local id, token, set = ARGV[2], ARGV[3], ARGV[4]
local _, refusal = leased_record(id, token)
if refusal then return { refusal } end
local field = 'p:' .. id
local pct, msg = 0, ''
local old = redis.call('HGET', K_DATA, field)
if old then
  local p = cmsgpack.unpack(old)
  pct, msg = p[1], p[2]
end
if string.find(set, 'p', 1, true) then pct = tonumber(ARGV[5]) end
if string.find(set, 'm', 1, true) then msg = ARGV[6] end
redis.call('HSET', K_DATA, field, cmsgpack.pack({ pct, msg, now }))
if string.find(set, 'c', 1, true) then
  if ARGV[7] == '' then
    redis.call('HDEL', K_DATA, 'c:' .. id)
  else
    redis.call('HSET', K_DATA, 'c:' .. id, ARGV[7])
  end
end
return { { 'OK', now } }

-- enqueue.lua: creates jobs in waiting (or delayed), or reports the existing job for an id
-- that is taken (the id is the dedupe key: nothing about the existing job changes). Options a
-- job leaves unset ('') take the queue's defaults (meta d_max, d_bo, d_to), then the server's.
-- Job hashes hold only non-default fields (see common.lua).
-- ARGV: [1] wake channel, [2] n, [3] server default max attempts, then 10 per job: id, name,
--       payload, content type, metadata JSON, delay ms, priority, max attempts, backoff,
--       timeout ms. (The idempotency key is derived from queue, id and create time: not stored.)
-- Reply: { now_ms, per job: {'C', max attempts, backoff, timeout ms} created
--          | {'E', field, value, ...} existing job's hash }.
local now = now_ms()
local n = tonumber(ARGV[2])
local d = redis.call('HMGET', K_META, 'd_max', 'd_bo', 'd_to')
local d_max, d_bo, d_to = d[1] or ARGV[3], d[2] or '', d[3] or '0'
local out = { now }
-- Appends field k = v to an HSET argument list unless v is the default.
local function opt(fields, k, v, default)
  if v ~= default then fields[#fields + 1] = k; fields[#fields + 1] = v end
end
local woke = false
for j = 0, n - 1 do
  local b = 4 + j * 10
  local id = ARGV[b]
  local jk = job_key(id)
  local existing = redis.call('HGETALL', jk)
  if #existing > 0 then
    table.insert(existing, 1, 'E')
    out[#out + 1] = existing
  else
    local delay, pri = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
    local max, bo, to = ARGV[b + 7], ARGV[b + 8], ARGV[b + 9]
    if max == '' then max = d_max end
    if bo == '' then bo = d_bo end
    if to == '' then to = d_to end
    -- Fields left at their default (empty content type, metadata, backoff; no timeout; no
    -- replays) are not stored: readers take a missing field as its default, and every field
    -- saved is memory per waiting job.
    local fields = { 'n', ARGV[b + 1], 'p', ARGV[b + 2], 'pri', pri, 'max', max, 'att', 0,
      'c0', now }
    opt(fields, 'ct', ARGV[b + 3], '')
    opt(fields, 'md', ARGV[b + 4], '{}')
    opt(fields, 'bo', bo, '')
    opt(fields, 'to', to, '0')
    if delay > 0 then
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'delayed'
      fields[#fields + 1] = 'rt'; fields[#fields + 1] = now + delay
      redis.call('HSET', jk, unpack(fields))
      redis.call('ZADD', K_DELAYED, now + delay, id)
    else
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'waiting'
      fields[#fields + 1] = 'rt'; fields[#fields + 1] = now
      redis.call('HSET', jk, unpack(fields))
      enqueue_ready(id, pri, now)
      woke = true
    end
    out[#out + 1] = { 'C', max, bo, to }
  end
end
if woke then redis.call('PUBLISH', WAKE, '1') end
return out

-- enqueue.lua: creates jobs in waiting (or delayed), or reports the existing job for an id
-- that is taken (the id is the dedupe key: nothing about the existing job changes).
-- ARGV: [1] wake channel, [2] n, then 11 per job: id, name, payload, content type,
--       metadata JSON, delay ms, priority, max attempts, backoff, timeout ms, idempotency key.
-- Reply: { now_ms, per job: {'C'} created | {'E', field, value, ...} existing job's hash }.
local now = now_ms()
local n = tonumber(ARGV[2])
local out = { now }
local woke = false
for j = 0, n - 1 do
  local b = 3 + j * 11
  local id = ARGV[b]
  local jk = job_key(id)
  local existing = redis.call('HGETALL', jk)
  if #existing > 0 then
    table.insert(existing, 1, 'E')
    out[#out + 1] = existing
  else
    local delay, pri = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
    redis.call('HSET', jk, 'n', ARGV[b + 1], 'p', ARGV[b + 2], 'ct', ARGV[b + 3], 'md', ARGV[b + 4],
      'pri', pri, 'max', ARGV[b + 7], 'att', 0, 'bo', ARGV[b + 8], 'to', ARGV[b + 9],
      'ik', ARGV[b + 10], 'c0', now, 'rp', 0)
    if delay > 0 then
      schedule(id, jk, now + delay)
    else
      make_ready(id, jk, pri, now)
      woke = true
    end
    out[#out + 1] = { 'C' }
  end
end
if woke then redis.call('PUBLISH', WAKE, '1') end
return out

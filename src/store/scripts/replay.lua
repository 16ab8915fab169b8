-- replay.lua: moves dead jobs back to waiting under their ids, with a fresh attempt budget
-- (attempts made = 0; the error history stays). Replaying a job that is not dead does
-- nothing and reports it as skipped, so a replay is idempotent.
-- ARGV: [1] wake channel, [2] 'ids' | 'filter';
--   ids:    [3] n, [4 ..] ids
--   filter: [3 .. 8] filter (name, error type, reason, message prefix, after ms, before ms;
--           '' / -1 = any), [9] cursor score ('' = start), [10] max entries to examine
-- Reply: { replayed ids, skipped ids, next cursor ('' = done) }
local now = now_ms()
local replayed, skipped = {}, {}
local function replay(id, jk)
  redis.call('ZREM', K_DEAD, id)
  redis.call('HDEL', jk, 'dr', 'ft')
  redis.call('HSET', jk, 'att', 0)
  redis.call('HINCRBY', jk, 'rp', 1)
  make_ready(id, jk, tonumber(redis.call('HGET', jk, 'pri')), now)
  replayed[#replayed + 1] = id
end
local cursor = ''
if ARGV[2] == 'ids' then
  for i = 1, tonumber(ARGV[3]) do
    local id = ARGV[3 + i]
    local jk = job_key(id)
    if redis.call('HGET', jk, 'st') == 'dead' then replay(id, jk) else skipped[#skipped + 1] = id end
  end
else
  local filter = read_filter(3)
  local budget = tonumber(ARGV[10])
  cursor = scan_dead(ARGV[9], budget, budget, filter, replay)
end
if #replayed > 0 then redis.call('PUBLISH', WAKE, '1') end
return { replayed, skipped, cursor }

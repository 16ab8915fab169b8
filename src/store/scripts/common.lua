-- common.lua: shared by every jobwire script (prepended to each at build time).
--
-- KEYS, the same eight for every script, all under one hash tag {queue}:
--   1 waiting    zset  id -> (1000 - priority) * 2^42 + seq   (priority first, FIFO by ready order)
--   2 delayed    zset  id -> due time (ms)
--   3 active     zset  id -> min(lease deadline, attempt deadline) (ms)
--   4 completed  zset  id -> finish time (ms)
--   5 dead       zset  id -> dead time (ms)
--   6 meta       hash  queue config (d_max, d_bo, d_to, keep_completed, completed_age_ms,
--                      keep_dead, dead_age_ms, rate_max, rate_ms, max_active), state (paused,
--                      throttle_until) and the sequence counters (seq, dseq)
--   7 job prefix "jw:{queue}:job:" (not a key itself): job keys are prefix .. id. The batched
--                scripts address jobs whose ids they only learn inside the script; the prefix
--                carries the queue's hash tag, so every job key is in the same cluster slot.
--   8 limiter    zset  lease token -> start time (ms): the rate limit's sliding window
-- ARGV[1] is always the queue's wake-up channel (PUBLISHed when a job becomes ready).
--
-- Job hash fields: n name, p payload, ct content type, md metadata (JSON), st state,
-- pri priority, max max attempts, att attempts made, bo backoff "kind,delay_ms,jitter,max_ms",
-- to timeout ms, err attempt errors (JSON array), dr dead reason, c0 create ms, rt ready ms,
-- lt lease ms, ft finish ms, tok lease token, wk worker id, ad attempt deadline ms,
-- rp replays (the idempotency key is derived: queue/id/c0). enqueue.lua leaves out fields at their default (ct, md,
-- bo, to empty; rp 0): every reader takes a missing field as its default.

local K_WAITING, K_DELAYED, K_ACTIVE, K_COMPLETED, K_DEAD, K_META =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local JOB_PREFIX = KEYS[7]
local K_LIMITER = KEYS[8]
local WAKE = ARGV[1]

local PRIORITY_SPAN = 4398046511104 -- 2^42: room for the sequence under each priority level

-- A whole number as an exact decimal string: Lua's own number-to-string keeps only 14
-- significant digits, too few for scores past 10^14.
local function int(x)
  return string.format('%.0f', x)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Dead-set scores are dead_ms * 1000 + (a per-queue sequence mod 1000), unique unless one
-- queue dead-letters over 1000 jobs in one millisecond, so a page cursor is a single score.
local DEAD_SCALE = 1000

local function dead_score(now)
  return now * DEAD_SCALE + (redis.call('HINCRBY', K_META, 'dseq', 1) % DEAD_SCALE)
end

local function job_key(id)
  return JOB_PREFIX .. id
end

local function meta_number(field, default)
  local v = redis.call('HGET', K_META, field)
  if v then return tonumber(v) end
  return default
end

-- Adds a job to the waiting set (its hash's st/rt are the caller's to set).
local function enqueue_ready(id, pri, now)
  local seq = redis.call('HINCRBY', K_META, 'seq', 1) % PRIORITY_SPAN
  redis.call('ZADD', K_WAITING, int((1000 - pri) * PRIORITY_SPAN + seq), id)
end

-- Puts a job in waiting, after every job already ready at its priority.
local function make_ready(id, jk, pri, now)
  enqueue_ready(id, pri, now)
  redis.call('HSET', jk, 'st', 'waiting', 'rt', now)
end

local function schedule(id, jk, due)
  redis.call('ZADD', K_DELAYED, due, id)
  redis.call('HSET', jk, 'st', 'delayed', 'rt', due)
end

-- Moves up to `limit` due delayed jobs to waiting, in due order. Returns how many.
local function promote_due(now, limit)
  local due = redis.call('ZRANGE', K_DELAYED, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  local n = 0
  for i = 1, #due, 2 do
    local id = due[i]
    local jk = job_key(id)
    redis.call('ZREM', K_DELAYED, id)
    local pri = redis.call('HGET', jk, 'pri')
    if pri then
      make_ready(id, jk, tonumber(pri), tonumber(due[i + 1]))
      n = n + 1
    end
  end
  return n
end

local function next_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return -1
end

-- Deletes the oldest entries of a finished-jobs set past `keep` entries or `max_age_ms`
-- (bounded: at most `budget` jobs per call, so eviction is lazy but never unbounded).
local function trim(key, keep, max_age_ms, now, budget, scale)
  local removed = 0
  local excess = redis.call('ZCARD', key) - keep
  if excess > 0 then
    local gone = redis.call('ZPOPMIN', key, math.min(excess, budget))
    for i = 1, #gone, 2 do redis.call('DEL', job_key(gone[i])) end
    removed = #gone / 2
  end
  if max_age_ms > 0 and removed < budget then
    local old = redis.call('ZRANGE', key, '-inf', int((now - max_age_ms) * scale), 'BYSCORE', 'LIMIT', 0, budget - removed)
    for _, id in ipairs(old) do
      redis.call('ZREM', key, id)
      redis.call('DEL', job_key(id))
    end
  end
end

-- `added` jobs were just completed: the budget covers them, so the set cannot outgrow its
-- limit however large the ack batches are.
local function trim_completed(now, added)
  trim(K_COMPLETED, meta_number('keep_completed', 1000), meta_number('completed_age_ms', 0), now, 100 + added, 1)
end

local function trim_dead(now)
  trim(K_DEAD, meta_number('keep_dead', 100000), meta_number('dead_age_ms', 2592000000), now, 100, DEAD_SCALE)
end

-- The delay before the retry that follows failed attempt `att` (1-based), in ms.
-- fixed: d; exponential: d * 2^(att-1) (BullMQ's formula); then capped by max_delay, then
-- jittered: drawn uniformly from [(1 - jitter) * d, d] using the caller's random r in [0, 1).
local function backoff_delay(bo, att, r)
  if not bo or bo == '' then return 0 end
  local kind, base, jitter, cap = string.match(bo, '^(%a+),(%d+),([%d%.eE%-]+),(%d+)$')
  base, jitter, cap = tonumber(base), tonumber(jitter), tonumber(cap)
  local d = base
  if kind == 'exponential' then d = base * (2 ^ (att - 1)) end
  if cap > 0 and d > cap then d = cap end
  d = d * (1 - jitter * r)
  return math.floor(d)
end

-- Ends a job's current attempt as failed: records the error, then retries (delayed or
-- waiting), returns the job without consuming the attempt (RATE_LIMITED), or dead-letters it,
-- all in this one script. `disposition` is RETRY, NO_RETRY or RATE_LIMITED; `exhausted_reason`
-- is the dead reason when no attempt remains (ATTEMPTS_EXHAUSTED, LEASE_EXPIRED, TIMED_OUT).
-- Returns state, time (ready or dead), dead reason ('' unless dead).
local function fail_attempt(id, jk, now, disposition, exhausted_reason, message, etype, details, retry_after, r)
  local f = redis.call('HMGET', jk, 'att', 'max', 'bo', 'wk', 'pri', 'err')
  local att, max, bo, wk, pri = tonumber(f[1]) or 0, tonumber(f[2]), f[3], f[4] or '', tonumber(f[5])
  local state, at, reason = '', now, ''
  local delay = 0
  if disposition == 'RATE_LIMITED' then
    if retry_after < 0 then retry_after = 1000 end
    delay = retry_after
    redis.call('HINCRBY', jk, 'att', -1)
  elseif disposition == 'NO_RETRY' then
    reason = 'NO_RETRY'
  elseif att >= max then
    reason = exhausted_reason
  elseif retry_after >= 0 then
    delay = retry_after
  else
    delay = backoff_delay(bo, att, r)
  end

  local errors = {}
  if f[6] and f[6] ~= '' then errors = cjson.decode(f[6]) end
  errors[#errors + 1] = { a = att, m = message, t = etype, d = details, w = wk, ts = now, x = disposition, rd = delay }
  while #errors > 1000 do table.remove(errors, 1) end
  redis.call('HSET', jk, 'err', cjson.encode(errors))
  redis.call('ZREM', K_ACTIVE, id)
  redis.call('HDEL', jk, 'tok', 'ad')

  if reason ~= '' then
    redis.call('ZADD', K_DEAD, int(dead_score(now)), id)
    redis.call('HSET', jk, 'st', 'dead', 'dr', reason, 'ft', now)
    trim_dead(now)
    return { 'dead', now, reason }
  elseif delay > 0 then
    schedule(id, jk, now + delay)
    return { 'delayed', now + delay, '' }
  end
  make_ready(id, jk, pri, now)
  redis.call('PUBLISH', WAKE, '1')
  return { 'waiting', now, '' }
end

-- Does dead job `jk` (dead at `dead_ms`) match the filter
-- {name, error type, reason, message prefix, after ms, before ms} ('' or -1 = any)?
local function matches(jk, dead_ms, filter)
  if filter[5] >= 0 and dead_ms < filter[5] then return false end
  if filter[6] >= 0 and dead_ms >= filter[6] then return false end
  local f = redis.call('HMGET', jk, 'n', 'dr', 'err')
  if filter[1] ~= '' and f[1] ~= filter[1] then return false end
  if filter[3] ~= '' and f[2] ~= filter[3] then return false end
  if filter[2] ~= '' or filter[4] ~= '' then
    local errors = f[3] and cjson.decode(f[3]) or {}
    local last = errors[#errors]
    if not last then return false end
    if filter[2] ~= '' and last.t ~= filter[2] then return false end
    if filter[4] ~= '' and string.sub(last.m or '', 1, #filter[4]) ~= filter[4] then return false end
  end
  return true
end

-- Reads the filter from ARGV[i..i+5]; returns it and the next index.
local function read_filter(i)
  return { ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]) }, i + 6
end

-- Walks the dead set in dead-time order after the cursor score (exclusive; '-inf' = from the
-- start), calling visit(id, jk) for each matching entry, until `want` matched or `budget`
-- entries were examined. visit may remove the entry. Returns the cursor score of the last
-- entry examined, or '' when the set is exhausted.
local function scan_dead(cursor, want, budget, filter, visit)
  local examined, matched = 0, 0
  local from = '-inf'
  if cursor ~= '-inf' and cursor ~= '' then from = '(' .. cursor end
  while true do
    local chunk = redis.call('ZRANGE', K_DEAD, from, '+inf', 'BYSCORE', 'LIMIT', 0, 200, 'WITHSCORES')
    if #chunk == 0 then return '' end
    for i = 1, #chunk, 2 do
      local id, score = chunk[i], chunk[i + 1]
      examined = examined + 1
      from = '(' .. score
      local jk = job_key(id)
      if matches(jk, math.floor(tonumber(score) / DEAD_SCALE), filter) then
        visit(id, jk)
        matched = matched + 1
      end
      if examined >= budget or matched >= want then return score end
    end
  end
end

-- A concurrency-limited queue frees a slot: wake the lease loops of every replica.
local function wake_if_concurrency_limited()
  if redis.call('HEXISTS', K_META, 'max_active') == 1 then
    redis.call('PUBLISH', WAKE, '1')
  end
end

-- The selection of replay.lua and delete_dead.lua: applies act(id, jk) to each listed id that
-- is dead (ARGV[2] 'ids': [3] n, [4 ..] ids) or to each dead job matching the filter (ARGV[2]
-- 'filter': [3 .. 8] filter, [9] cursor, [10] max entries to examine). Returns the listed ids
-- that were not dead, and the next cursor ('' = done).
local function for_selected_dead(act)
  local skipped, cursor = {}, ''
  if ARGV[2] == 'ids' then
    for i = 1, tonumber(ARGV[3]) do
      local id = ARGV[3 + i]
      local jk = job_key(id)
      if redis.call('HGET', jk, 'st') == 'dead' then act(id, jk) else skipped[#skipped + 1] = id end
    end
  else
    local budget = tonumber(ARGV[10])
    cursor = scan_dead(ARGV[9], budget, budget, read_filter(3), act)
  end
  return skipped, cursor
end

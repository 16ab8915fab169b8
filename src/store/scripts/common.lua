-- common.lua: shared by every jobwire script (prepended to each at build time).
--
-- KEYS, the same eight for every script, all under one hash tag {queue}:
--   1 waiting    zset  priority level -> -priority: the levels that may have waiting jobs,
--                      highest priority first. The jobs of level p wait in the list
--                      KEYS[1] .. ':' .. p, in the order they became ready (FIFO).
--   2 delayed    zset  id -> due time (ms)
--   3 active     zset  id -> min(lease deadline, attempt deadline) (ms)
--   4 completed  zset  id -> finish time (ms)
--   5 dead       zset  id -> dead time (ms)
--   6 meta       hash  queue config (d_max, d_bo, d_to, keep_completed, completed_age_ms,
--                      keep_dead, dead_age_ms, rate_max, rate_ms, max_active), state (paused,
--                      throttle_until), the dead-set sequence (dseq) and the jobs removed by
--                      retention not yet counted by a reaper (trimmed_completed, trimmed_dead)
--   7 job prefix "jw:{queue}:job:" (not a key itself): job keys are prefix .. id. The batched
--                scripts address jobs whose ids they only learn inside the script; the prefix
--                carries the queue's hash tag, so every job key is in the same cluster slot.
--   8 limiter    zset  lease token -> start time (ms): the rate limit's sliding window
--   9 settled    hash  lease token -> outcome of its applied Ack ('A') or Fail
--                      ('F,<state>,<ready or dead ms>,<dead reason>'), so that a worker
--                      repeating a settle whose reply it lost hears OK, not LEASE_LOST
--  10 settled_at zset  lease token -> settle time (ms): the order in which 9 is trimmed.
--                      9 and 10 keep the last SETTLED_KEEP settles and expire
--                      SETTLED_TTL_MS after the last one, so they stay small.
--  11 calls      zset  lease call id -> the call's lease deadline (ms): lease calls whose
--                      reply jobwire has not confirmed (see "Lost lease replies" below)
--  12 call_jobs  hash  lease call id -> the ids it leased (MessagePack array), or '' for a
--                      call released before it ran (a tombstone: it leases nothing if it
--                      runs later)
-- ARGV[1] is always the queue's wake-up channel (PUBLISHed when a job becomes ready).
--
-- A job is one string key holding MessagePack values back to back:
--   the header, 17 values the scripts read and write: first the lease part (LEASE_VALUES:
--     state, attempts made, timeout ms (0 none), name, lease ms, lease token, worker id,
--     attempt deadline ms), which a lease rewrites without decoding the rest; then max
--     attempts, priority, backoff "kind,delay_ms,jitter,max_ms" ('' none), create ms,
--     ready ms, finish ms, replays, dead reason, the last attempt error (a JSON array of
--     at most one error, its details cut to LAST_DETAILS_BYTES; '' none: see the history
--     below; records written before the history key may hold a longer array);
--     unset strings are '' and unset numbers 0;
--   then the body, the array [payload, content type, metadata JSON], written by the server
--     at enqueue and copied unread by the scripts.
-- Unpacked (split_record), the header is a table whose first slot is the body's offset and
-- whose fields sit at the positions ST .. ERR below. Separate values rather than one array:
-- cmsgpack decodes values onto the stack (one table, presized) and a script that needs only
-- the lease part stops there (lease_fields, lease.lua). In this Lua every value decoded or
-- encoded costs some hundreds of instructions, so the hot paths touch as few as they can.
-- One string instead of a hash of fields: a 100-byte payload would push a hash past
-- hash-max-listpack-value (64) into a hashtable, about 760 bytes a job against about 230.
-- (The idempotency key is derived: queue/id/c0.)
--
-- The error history of a job lives beside its record, in the hash ERR_PREFIX .. id
-- ("jw:{queue}:errors:<id>": same hash tag, and no job key starts with it), so that no
-- transition but a failure touches it and a lease never copies it. Fields: n (errors
-- recorded so far), '1' (the first error, always kept), lo .. n (the newest ones kept),
-- bytes (the JSON size of entries lo .. n), dropped (how many were removed). The entries
-- kept after the first are the last HISTORY_LAST within HISTORY_BYTES of JSON; the newest
-- is always kept. So a job stores at most the first error, HISTORY_BYTES and the newest
-- (each error is at most 8 KiB of message and 64 KiB of details, cut by the API).

local K_WAITING, K_DELAYED, K_ACTIVE, K_COMPLETED, K_DEAD, K_META =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local JOB_PREFIX = KEYS[7]
local K_LIMITER = KEYS[8]
local K_SETTLED, K_SETTLED_AT, K_CALLS, K_CALL_JOBS = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local WAKE = ARGV[1]
-- "jw:{queue}:job:" -> "jw:{queue}:errors:" (see the error history above).
local ERR_PREFIX = string.sub(JOB_PREFIX, 1, -5) .. 'errors:'
local HISTORY_LAST, HISTORY_BYTES, LAST_DETAILS_BYTES = 10, 65536, 2048

-- The per-call byte budget. Every job record a script reads is copied into Lua (and most
-- are written back whole, body included): about 2-5 ms per MiB inside Redis, measured in
-- tests/it/script_time.rs. So a script that walks a list of jobs stops taking the next one
-- once the records it has read reach CALL_BYTES (it always takes the first): what it did is
-- complete, each job's change atomic, and its reply says where it stopped, so the server
-- calls again for the rest. `spent` counts the bytes read by this call.
local CALL_BYTES = 1048576
local spent = 0

local function over_budget()
  return spent >= CALL_BYTES
end

-- GET of a job record, counted in `spent`.
local function get_record(jk)
  local rec = redis.call('GET', jk)
  if rec then spent = spent + #rec end
  return rec
end

-- The lease part of a job record only (state .. attempt deadline: short strings and
-- numbers, under 1 KiB: names, tokens and worker ids are capped by the API), without
-- copying the rest; enough for lease_fields and lease_refusal.
local LEASE_PART_BYTES = 1024
local function get_lease_part(jk)
  local rec = redis.call('GETRANGE', jk, 0, LEASE_PART_BYTES - 1)
  if rec == '' then return nil end
  return rec
end

local ST, ATT, TO, NAME, LT, TOK, WK, AD, MAX, PRI, BO, C0, RT, FT, RP, DR, ERR =
  2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18
local HEADER_VALUES, LEASE_VALUES = 17, 8

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

local function errors_key(id)
  return ERR_PREFIX .. id
end

-- A job's record split into its header (a table, see above) and its body (a string).
local function split_record(rec)
  local h = { cmsgpack.unpack_limit(rec, HEADER_VALUES, 0) }
  if h[1] < 0 then return h, '' end
  return h, string.sub(rec, h[1] + 1)
end

-- The job's header and body, or nil when the job does not exist.
local function load_job(jk)
  local rec = get_record(jk)
  if not rec then return nil end
  return split_record(rec)
end

local function job_record(h, body)
  return cmsgpack.pack(unpack(h, ST, ERR)) .. body
end

local function save_job(jk, h, body)
  redis.call('SET', jk, job_record(h, body))
end

-- The lease part of a record, decoded without building its header table:
-- state, lease ms, name, lease token, attempt deadline ms.
local function lease_fields(rec)
  local _, st, _, _, name, lt, tok, _, ad = cmsgpack.unpack_limit(rec, LEASE_VALUES, 0)
  return st, lt, name, tok, ad
end

-- Appends three values to a flat reply list.
local function push3(t, a, b, c)
  local k = #t
  t[k + 1], t[k + 2], t[k + 3] = a, b, c
end

local function meta_number(field, default)
  local v = redis.call('HGET', K_META, field)
  if v then return tonumber(v) end
  return default
end

-- The list of waiting jobs of priority level `pri`.
local function level_key(pri)
  return K_WAITING .. ':' .. pri
end

-- Appends ids (a list) to the waiting jobs of priority `pri`, after every job already ready
-- there.
local function push_ready(ids, pri)
  redis.call('RPUSH', level_key(pri), unpack(ids))
  redis.call('ZADD', K_WAITING, -pri, pri)
end

-- Puts job `id` (header h, body) in waiting at `now`, after every job ready at its priority.
local function make_ready(id, jk, h, body, now)
  h[ST], h[RT] = 'waiting', now
  save_job(jk, h, body)
  push_ready({ id }, h[PRI])
end

local function schedule(id, jk, h, body, due)
  h[ST], h[RT] = 'delayed', due
  save_job(jk, h, body)
  redis.call('ZADD', K_DELAYED, due, id)
end

-- Pops up to n waiting ids, highest priority first, FIFO within a level. A level whose
-- list ran dry leaves the level set (lazily: a level may outlive its list by one call).
-- Returns the ids and the level of each (for unpop_ready).
local function pop_ready(n)
  local ids, levels = {}, {}
  while #ids < n do
    local level = redis.call('ZRANGE', K_WAITING, 0, 0)[1]
    if not level then break end
    local want = n - #ids
    local got = redis.call('LPOP', level_key(level), want)
    if got then
      for _, id in ipairs(got) do
        ids[#ids + 1] = id
        levels[#ids] = level
      end
    end
    if not got or #got < want then redis.call('ZREM', K_WAITING, level) end
  end
  return ids, levels
end

-- Puts ids[from ..] (popped by pop_ready, with their levels) back at the head of their
-- lists, in their order, as if they had never been popped.
local function unpop_ready(ids, levels, from)
  for k = #ids, from, -1 do
    redis.call('LPUSH', level_key(levels[k]), ids[k])
  end
  local seen = {}
  for k = from, #ids do
    local level = levels[k]
    if not seen[level] then
      seen[level] = true
      redis.call('ZADD', K_WAITING, -tonumber(level), level)
    end
  end
end

-- The number of waiting jobs, summed over the levels.
local function waiting_count()
  local n = 0
  for _, level in ipairs(redis.call('ZRANGE', K_WAITING, 0, -1)) do
    n = n + redis.call('LLEN', level_key(level))
  end
  return n
end

-- Moves up to `limit` due delayed jobs to waiting, in due order. Returns how many.
local function promote_due(now, limit)
  local due = redis.call('ZRANGE', K_DELAYED, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  local n = 0
  for i = 1, #due, 2 do
    -- Past the byte budget the rest stay due: the caller sees a due time already passed.
    if over_budget() then break end
    local id = due[i]
    local jk = job_key(id)
    redis.call('ZREM', K_DELAYED, id)
    local h, body = load_job(jk)
    if h and h[ST] == 'delayed' then
      make_ready(id, jk, h, body, tonumber(due[i + 1]))
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

-- Deletes the jobs of a list of ids with their error histories, in one DEL per chunk.
local function delete_jobs(ids)
  for i = 1, #ids, 500 do
    local keys = {}
    for j = i, math.min(i + 499, #ids) do
      keys[#keys + 1] = job_key(ids[j])
      keys[#keys + 1] = errors_key(ids[j])
    end
    redis.call('DEL', unpack(keys))
  end
end

-- Deletes the oldest entries of a finished-jobs set past `keep` entries or `max_age_ms`
-- (bounded: at most `budget` jobs per call, so eviction is lazy but never unbounded).
-- Adds the number removed to the meta field `trimmed_completed` or `trimmed_dead`, which the
-- reaper collects for the trimmed-jobs counter (reap.lua). Returns the number removed.
local function trim(key, keep, max_age_ms, now, budget, scale)
  local removed = 0
  local excess = redis.call('ZCARD', key) - keep
  if excess > 0 then
    local gone = redis.call('ZPOPMIN', key, math.min(excess, budget))
    local ids = {}
    for i = 1, #gone, 2 do ids[#ids + 1] = gone[i] end
    delete_jobs(ids)
    removed = #ids
  end
  if max_age_ms > 0 and removed < budget then
    local old = redis.call('ZRANGE', key, '-inf', int((now - max_age_ms) * scale), 'BYSCORE', 'LIMIT', 0, budget - removed)
    if #old > 0 then
      redis.call('ZREM', key, unpack(old))
      delete_jobs(old)
      removed = removed + #old
    end
  end
  if removed > 0 then
    local field = 'trimmed_dead'
    if key == K_COMPLETED then field = 'trimmed_completed' end
    redis.call('HINCRBY', K_META, field, removed)
  end
  return removed
end

-- Retention of completed jobs: {keep, max age ms} from the queue's meta.
local function completed_retention()
  local m = redis.call('HMGET', K_META, 'keep_completed', 'completed_age_ms')
  return tonumber(m[1]) or 1000, tonumber(m[2]) or 0
end

-- `added` jobs were just completed: the budget covers them, so the set cannot outgrow its
-- limit however large the ack batches are.
local function trim_completed(now, added, keep, max_age_ms)
  trim(K_COMPLETED, keep, max_age_ms, now, 100 + added, 1)
end

-- Retention of dead jobs: {keep, max age ms} from the queue's meta.
local function dead_retention()
  local m = redis.call('HMGET', K_META, 'keep_dead', 'dead_age_ms')
  return tonumber(m[1]) or 100000, tonumber(m[2]) or 2592000000
end

local function trim_dead(now)
  local keep, max_age_ms = dead_retention()
  trim(K_DEAD, keep, max_age_ms, now, 100, DEAD_SCALE)
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

-- Appends one error (JSON) to history hash ek, then drops the oldest entries but the
-- first while more than HISTORY_LAST follow it or they pass HISTORY_BYTES (the newest
-- stays), counting them. O(1) a call but for the drops: no entry is decoded.
local function append_error(ek, entry)
  local n = redis.call('HINCRBY', ek, 'n', 1)
  redis.call('HSET', ek, n, entry)
  if n == 1 then return end
  local bytes = redis.call('HINCRBY', ek, 'bytes', #entry)
  local lo = tonumber(redis.call('HGET', ek, 'lo')) or 2
  local gone = 0
  while lo < n and (n - lo + 1 > HISTORY_LAST or bytes > HISTORY_BYTES) do
    bytes = bytes - redis.call('HSTRLEN', ek, lo)
    redis.call('HDEL', ek, lo)
    lo, gone = lo + 1, gone + 1
  end
  if gone > 0 then
    redis.call('HSET', ek, 'lo', lo, 'bytes', bytes)
    redis.call('HINCRBY', ek, 'dropped', gone)
  end
end

-- Records error `e` (a table) of job `id` in its history; returns the header's copy (the
-- last error with its details cut to LAST_DETAILS_BYTES). A record written before the
-- history key existed has its whole history in the header: it moves to the hash first.
local function record_error(id, h, e)
  local ek = errors_key(id)
  if h[ERR] ~= '' and redis.call('EXISTS', ek) == 0 then
    local old = cjson.decode(h[ERR])
    for i, o in ipairs(old) do
      if i == 1 or i > #old - HISTORY_LAST then append_error(ek, cjson.encode(o)) end
    end
    if #old > HISTORY_LAST + 1 then redis.call('HINCRBY', ek, 'dropped', #old - HISTORY_LAST - 1) end
  end
  append_error(ek, cjson.encode(e))
  local d = e.d or ''
  if #d > LAST_DETAILS_BYTES then
    -- Cut on a UTF-8 boundary (not inside a continuation byte), then mark the cut.
    local keep = LAST_DETAILS_BYTES - 40
    while keep > 0 and string.byte(d, keep + 1) >= 128 and string.byte(d, keep + 1) < 192 do keep = keep - 1 end
    e.d = string.sub(d, 1, keep) .. '\226\128\166[truncated ' .. (#d - keep) .. ' bytes]'
  end
  return '[' .. cjson.encode(e) .. ']'
end

-- Ends the current attempt of leased job `id` (header h, body) as failed: records the
-- error, then retries (delayed or waiting), returns the job without consuming the attempt
-- (RATE_LIMITED), or dead-letters it, all in this one script. `disposition` is RETRY,
-- NO_RETRY or RATE_LIMITED; `exhausted_reason` is the dead reason when no attempt remains
-- (ATTEMPTS_EXHAUSTED, LEASE_EXPIRED, TIMED_OUT).
-- Returns state, time (ready or dead), dead reason ('' unless dead). A job made waiting
-- needs a wake-up: the caller PUBLISHes once for all of its jobs (wake_after_failures).
local function fail_attempt(id, jk, h, body, now, disposition, exhausted_reason, message, etype, details, retry_after, r)
  local att = h[ATT]
  local reason = ''
  local delay = 0
  if disposition == 'RATE_LIMITED' then
    if retry_after < 0 then retry_after = 1000 end
    delay = retry_after
    h[ATT] = att - 1
  elseif disposition == 'NO_RETRY' then
    reason = 'NO_RETRY'
  elseif att >= h[MAX] then
    reason = exhausted_reason
  elseif retry_after >= 0 then
    delay = retry_after
  else
    delay = backoff_delay(h[BO], att, r)
  end

  h[ERR] = record_error(id, h, { a = att, m = message, t = etype, d = details, w = h[WK], ts = now, x = disposition, rd = delay })
  h[TOK], h[AD] = '', 0
  redis.call('ZREM', K_ACTIVE, id)

  if reason ~= '' then
    h[ST], h[DR], h[FT] = 'dead', reason, now
    save_job(jk, h, body)
    redis.call('ZADD', K_DEAD, int(dead_score(now)), id)
    trim_dead(now)
    return { 'dead', now, reason }
  elseif delay > 0 then
    schedule(id, jk, h, body, now + delay)
    return { 'delayed', now + delay, '' }
  end
  make_ready(id, jk, h, body, now)
  return { 'waiting', now, '' }
end

-- Checks the lease token of a settle-type call (ack, fail, renew) against the record
-- `rec` of job `id`. Returns nil when the job is active under `token`; otherwise the reply
-- for the job: { 'NOT_FOUND' } or { 'LEASE_LOST', state }.
local function lease_refusal(rec, token)
  if not rec then return { 'NOT_FOUND' } end
  local st, _, _, tok = lease_fields(rec)
  if st ~= 'active' or tok ~= token then return { 'LEASE_LOST', st } end
  return nil
end

-- The job of a settle-type call when it is active under `token`: its record; otherwise nil
-- and the refusal (see lease_refusal).
local function leased_record(id, token)
  local rec = get_record(job_key(id))
  local refusal = lease_refusal(rec, token)
  if refusal then return nil, refusal end
  return rec
end

-- Does dead job header h (dead at `dead_ms`) match the filter
-- {name, error type, reason, message prefix, after ms, before ms} ('' or -1 = any)?
local function matches(h, dead_ms, filter)
  if filter[5] >= 0 and dead_ms < filter[5] then return false end
  if filter[6] >= 0 and dead_ms >= filter[6] then return false end
  if filter[1] ~= '' and h[NAME] ~= filter[1] then return false end
  if filter[3] ~= '' and h[DR] ~= filter[3] then return false end
  if filter[2] ~= '' or filter[4] ~= '' then
    local errors = h[ERR] ~= '' and cjson.decode(h[ERR]) or {}
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
-- start) up to the score `upto` (inclusive; nil = '+inf'), calling visit(id, jk, h, body, rec)
-- for each matching entry, until `want` matched or `budget` entries were examined or visit
-- returned true. visit may remove the entry. Returns the cursor score of the last entry
-- examined, or '' when the set is exhausted.
local function scan_dead(cursor, want, budget, filter, visit, upto)
  local examined, matched = 0, 0
  local from = '-inf'
  if cursor ~= '-inf' and cursor ~= '' then from = '(' .. cursor end
  while true do
    local chunk = redis.call('ZRANGE', K_DEAD, from, upto or '+inf', 'BYSCORE', 'LIMIT', 0, 200, 'WITHSCORES')
    if #chunk == 0 then return '' end
    for i = 1, #chunk, 2 do
      local id, score = chunk[i], chunk[i + 1]
      examined = examined + 1
      from = '(' .. score
      local jk = job_key(id)
      local rec = get_record(jk)
      local stop = false
      if rec then
        local h, body = split_record(rec)
        if matches(h, math.floor(tonumber(score) / DEAD_SCALE), filter) then
          stop = visit(id, jk, h, body, rec)
          matched = matched + 1
        end
      end
      if stop or examined >= budget or matched >= want or over_budget() then return score end
    end
  end
end

-- A concurrency-limited queue frees a slot: wake the lease loops of every replica.
local function wake_if_concurrency_limited()
  if redis.call('HEXISTS', K_META, 'max_active') == 1 then
    redis.call('PUBLISH', WAKE, '1')
  end
end

-- After failed attempts: one wake-up when any job went back to waiting (or, on a
-- concurrency-limited queue, when a slot came free).
local function wake_after_failures(any_waiting)
  if any_waiting then
    redis.call('PUBLISH', WAKE, '1')
  else
    wake_if_concurrency_limited()
  end
end

-- The selection of replay.lua and delete_dead.lua: applies act(id, jk, h, body) to each
-- listed id that is dead (ARGV[2] 'ids': [3] n, [4 ..] ids) or to each dead job matching the
-- filter (ARGV[2] 'filter': [3 .. 8] filter, [9] cursor, [10] max entries to examine,
-- [11] the walk's last score, '' on its first call). Returns the listed ids that were not
-- dead, the next cursor ('' = done) and the walk's last score (to pass to the next call).
-- A walk acts on what was dead when it began, so a replayed job that dies again is not
-- replayed twice by one call. (Dead scores are ms * 1000 + a sequence mod 1000: an entry
-- added in the same millisecond as the newest one when the walk began, after a sequence
-- wrap, could still fall under the bound.)
local function for_selected_dead(act, header_only)
  local skipped, cursor, upto = {}, '', ''
  if ARGV[2] == 'ids' then
    for i = 1, tonumber(ARGV[3]) do
      -- Past the byte budget: the ids not reached are in neither list; the caller sends
      -- them again.
      if i > 1 and over_budget() then break end
      local id = ARGV[3 + i]
      local jk = job_key(id)
      if header_only then
        local part = get_lease_part(jk)
        if part and lease_fields(part) == 'dead' then act(id, jk) else skipped[#skipped + 1] = id end
      else
        local h, body = load_job(jk)
        if h and h[ST] == 'dead' then act(id, jk, h, body) else skipped[#skipped + 1] = id end
      end
    end
  else
    local budget = tonumber(ARGV[10])
    upto = ARGV[11] or ''
    if upto == '' then
      -- The first call of a walk: the newest entry now is the last one the walk acts on, so
      -- jobs that die (again) while it goes on are left for the next call.
      local top = redis.call('ZRANGE', K_DEAD, '+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
      if #top == 0 then return skipped, '', '' end
      upto = top[2]
    end
    cursor = scan_dead(ARGV[9], budget, budget, read_filter(3), act, upto)
  end
  return skipped, cursor, upto
end

-- Repeated settles. A worker whose Ack or Fail reply was lost (Redis answered after the
-- server's timeout) repeats it with the same token. The last SETTLED_KEEP applied settles
-- of a queue are remembered by token, for at most SETTLED_TTL_MS after the queue's last
-- settle, so the repeat answers as the first did.
local SETTLED_KEEP, SETTLED_TTL_MS = 10000, 3600000

-- Remembers applied settles: `flat` is { token, outcome, token, outcome, ... }.
local function remember_settled(flat, now)
  if #flat == 0 then return end
  local now_s = int(now)
  local scored = {}
  for i = 1, #flat, 2 do
    scored[#scored + 1] = now_s
    scored[#scored + 1] = flat[i]
  end
  for i = 1, #flat, 1000 do
    redis.call('HSET', K_SETTLED, unpack(flat, i, math.min(i + 999, #flat)))
    redis.call('ZADD', K_SETTLED_AT, unpack(scored, i, math.min(i + 999, #scored)))
  end
  -- At most as many as were just added: the set held at most SETTLED_KEEP before.
  local excess = redis.call('ZCARD', K_SETTLED_AT) - SETTLED_KEEP
  if excess > 0 then
    local gone = redis.call('ZPOPMIN', K_SETTLED_AT, excess)
    local tokens = {}
    for i = 1, #gone, 2 do tokens[#tokens + 1] = gone[i] end
    for i = 1, #tokens, 1000 do
      redis.call('HDEL', K_SETTLED, unpack(tokens, i, math.min(i + 999, #tokens)))
    end
  end
  redis.call('PEXPIRE', K_SETTLED, SETTLED_TTL_MS)
  redis.call('PEXPIRE', K_SETTLED_AT, SETTLED_TTL_MS)
end

-- The remembered outcome of the settle applied with `token`, or nil.
local function settled_outcome(token)
  local v = redis.call('HGET', K_SETTLED, token)
  if v then return v end
  return nil
end

-- Lost lease replies. A lease call may run in Redis after the server gave up waiting for
-- its reply; its jobs then reached no worker. So every lease call carries a call id (its
-- tokens are '<call id>-<slot>') and records the ids it leased in K_CALLS / K_CALL_JOBS as
-- unconfirmed. The server confirms the call once it has the reply (in its next lease call,
-- a confirm call, or implicitly by renewing any of its leases), which deletes the record.
-- When the reply is lost, the server releases the call by id (release_call.lua, retried
-- until Redis answers): its jobs still active under its tokens go back to waiting with the
-- attempt not charged, and a tombstone makes the call lease nothing should it run later.
-- If that release cannot run in time, the reaper treats the leases of an unconfirmed call
-- as released, never as failed: no attempt is charged and nothing is dead-lettered for a
-- lease no worker received. The cost of that rule: a job whose worker got it but whose
-- server died before confirming is released uncharged when its lease expires.

-- The lease call id of a lease token ('<call id>-<slot>'), or nil.
local function call_of(token)
  return string.match(token, '^(.+)%-%d+$')
end

-- Deletes the records of lease calls whose replies the server received.
local function confirm_calls(calls)
  for i = 1, #calls, 1000 do
    local chunk = { unpack(calls, i, math.min(i + 999, #calls)) }
    redis.call('ZREM', K_CALLS, unpack(chunk))
    redis.call('HDEL', K_CALL_JOBS, unpack(chunk))
  end
end

-- Is lease call `call` recorded and not confirmed?
local function unconfirmed(call)
  return call ~= nil and redis.call('HEXISTS', K_CALL_JOBS, call) == 1
end

-- Hands the leases of lease call `call` still active under its tokens back to waiting
-- without consuming the attempt (and their rate-limit starts), and forgets the call.
-- Returns how many jobs went back to waiting.
local function release_call(call, now)
  local packed = redis.call('HGET', K_CALL_JOBS, call)
  redis.call('ZREM', K_CALLS, call)
  redis.call('HDEL', K_CALL_JOBS, call)
  if not packed or packed == '' then return 0 end
  local prefix = call .. '-'
  local n = 0
  for _, id in ipairs(cmsgpack.unpack(packed)) do
    local jk = job_key(id)
    local rec = get_record(jk)
    if rec then
      local st, _, _, tok = lease_fields(rec)
      if st == 'active' and string.sub(tok, 1, #prefix) == prefix then
        local h, body = split_record(rec)
        redis.call('ZREM', K_ACTIVE, id)
        redis.call('ZREM', K_LIMITER, tok)
        h[ATT], h[TOK], h[AD] = h[ATT] - 1, '', 0
        make_ready(id, jk, h, body, now)
        n = n + 1
      end
    end
  end
  return n
end

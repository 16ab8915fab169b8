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
-- ARGV[1] is always the queue's wake-up, published when a job becomes ready: the command
-- and the channel, separated by one space. On one Redis (or behind Sentinel) it is
-- 'PUBLISH jw:wake:<queue>'; on a Redis Cluster 'SPUBLISH jw:{<queue>}:wake': sharded
-- pub/sub, whose channel is in the queue's slot (SPUBLISH inside a script must stay in the
-- slot of its keys) and whose message reaches only that shard's subscribers, where plain
-- PUBLISH would be broadcast over the whole cluster bus. The server chooses (keys.rs
-- wake_arg); the scripts do not know which backend they run on.
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
local WAKE_CMD, WAKE = string.match(ARGV[1], '^(%u+) (.+)$')
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

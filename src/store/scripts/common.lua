-- common.lua: shared by every jobwire script (prepended to each at build time, and the start
-- of the jobwire function library).
--
-- KEYS, the same twenty-nine for every queue script, all under one hash tag {queue} (so one
-- cluster slot), and no other key: a script never builds a key name, so Redis Cluster runs
-- it on the queue's node (src/store/keys.rs builds the list; tests/it/declared_keys.rs
-- checks every command each script runs against it).
--   1 waiting    list  ids of the waiting jobs of priority 0 (the default), in the order
--                      they became ready (FIFO)
--   2 delayed    zset  id -> due time (ms)
--   3 active     zset  id -> min(lease deadline, attempt deadline) (ms)
--   4 completed  zset  id -> finish time (ms)
--   5 dead       zset  id -> dead time (ms)
--   6 meta       hash  queue config (d_max, d_bo, d_to, keep_completed, completed_age_ms,
--                      keep_dead, dead_age_ms, rate_max, rate_ms, max_active), state (paused,
--                      throttle_until), the dead-set sequence (dseq), the waiting sequence
--                      (wseq, see 15) and the jobs removed by retention not yet counted by a
--                      reaper (trimmed_completed, trimmed_dead)
--   7 jobs       hash  id -> the job's header (see below)
--   8 limiter    zset  lease token -> start time (ms): the rate limit's sliding window
--   9 settled    hash  lease token -> outcome of its applied Ack ('A') or Fail
--                      ('F,<state>,<ready or dead ms>,<dead reason>'), so that a worker
--                      repeating a settle whose reply it lost hears OK, not LEASE_LOST
--  10 settled_at zset  lease token -> settle time (ms): the order in which 9 is trimmed.
--                      9 and 10 keep the last SETTLED_KEEP settles and expire
--                      SETTLED_TTL_MS after the last one, so they stay small.
--  11 calls      zset  lease call id -> the call's lease deadline (ms), or when the
--                      reaper looks at it again: lease calls whose reply jobwire has not
--                      confirmed, and tombstones (see "Lost lease replies", attempts.lua)
--  12 call_jobs  hash  lease call id -> the ids it leased (MessagePack array), or '' for a
--                      call released before it ran (a tombstone: it leases nothing if it
--                      runs later)
--  13 bodies     hash  id -> the job's body (see below)
--  14 errors     hash  the error histories of the queue's jobs (see below)
--  15 prio       zset  id -> (1000 - priority) * 2^40 + wseq: the waiting jobs of a priority
--                      other than 0 (priorities are -1000 .. 1000). Higher priority sorts
--                      first, and within a priority the sequence (HINCRBY of meta wseq, one
--                      per job made ready) keeps the order they became ready. Exact in a
--                      double: 2000 * 2^40 + 2^40 < 2^53; a queue would need 2^40 (10^12)
--                      jobs made ready before a sequence spills into the next level. The
--                      priority-0 jobs sort between those above and below 0
--                      (score ZERO_SCORE): a lease takes priority > 0, then the list, then
--                      priority < 0.
--  16 cancelled  zset  id -> finish time (ms): the CANCELLED jobs, kept by the completed
--                      retention (keep_completed, completed_age_ms) like 4
--  17 expired    zset  id -> finish time (ms): the EXPIRED jobs, kept the same way
--  18 expiry     zset  id -> expire time (ms): the WAITING and DELAYED jobs that have one,
--                      so the reaper finds those due without walking the queue
--  19 data       hash  what a job carries beside its header, one field per kind and job,
--                      `<kind>:<id>`: 'p' progress (MessagePack [percent, message, ms]),
--                      'c' checkpoint (bytes), 'r' result (bytes), 'x' the cancel
--                      ('<revoke ms>,<reason>': revoke ms is when the lease of a job
--                      cancelled while ACTIVE is revoked, 0 for a job cancelled while it
--                      waited; the reason is text, '' none); absent when the job has none.
--                      Deleting a job deletes them.
--  20-28 gwait, gseq, groups, gconf, gready, gblocked, glimit, gpause, gcount: the named groups
--                      of the queue (waiting jobs, counts, config, fairness, limits),
--                      described in groups.lua, which follows this file in every script.
--  29 created    zset  id -> create time (ms): the jobs enqueue.lua created under an id the
--                      server chose (an Enqueue without a job_id), so that a retry of that
--                      write never creates the job again once it is gone (CREATED_KEEP,
--                      CREATED_TTL_MS in enqueue.lua)
-- ARGV[1] is always the queue's wake-up, published when a job becomes ready: the command
-- and the channel, separated by one space. On one Redis (or behind Sentinel) it is
-- 'PUBLISH jw:wake:<queue>'; on a Redis Cluster 'SPUBLISH jw:{<queue>}:wake': sharded
-- pub/sub, whose channel is in the queue's slot (SPUBLISH inside a script must stay in the
-- slot of its keys) and whose message reaches only that shard's subscribers, where plain
-- PUBLISH would be broadcast over the whole cluster bus. The server chooses (keys.rs
-- wake_arg); the scripts do not know which backend they run on.
--
-- A job is two entries under its id: its header in 7 and its body in 13.
--   The header: 17 MessagePack values back to back that the scripts read and write: first
--     the lease part (LEASE_VALUES: state, attempts made, timeout ms (0 none), name, lease
--     ms, lease token, worker id, attempt deadline ms), which a lease rewrites without
--     decoding the rest; then max attempts, priority, backoff "kind,delay_ms,jitter,max_ms"
--     ('' none), create ms, ready ms, finish ms, replays, dead reason, the last attempt
--     error (a JSON array of at most one error, its details cut to LAST_DETAILS_BYTES; ''
--     none: see the history below), the group key ('' the queue's default group), the
--     expire time ms (0 never), the time a cancel was requested ms (0 never); unset
--     strings are '' and unset numbers 0. A header written before the last three existed
--     has 17 values: split_header fills in the missing ones as unset.
--   The body: the array [payload, content type, metadata JSON], written by the server at
--     enqueue and never rewritten: state changes write the header only, and only the
--     scripts that return a job to the server (lease, a taken id at enqueue, list_dead,
--     get_job) read the body, to reply `header .. body` (what src/store/codec.rs decodes).
-- Unpacked (load_job), the header is a table whose first slot is the decoder's offset and
-- whose fields sit at the positions ST .. ERR below. Separate values rather than one array:
-- cmsgpack decodes values onto the stack (one table, presized) and a script that needs only
-- the lease part stops there (lease_fields, lease.lua). In this Lua every value decoded or
-- encoded costs some hundreds of instructions, so the hot paths touch as few as they can.
-- Entries of per-queue hashes rather than a key per job: Redis Cluster needs every key a
-- script touches declared in KEYS, and the batched scripts (lease, reap, promote, replay by
-- filter, purge, trim, delete_queue) learn their ids only inside the script. Memory stays
-- about the same (a key costs a dict entry, a key object and the full key name; a hash
-- entry a dict entry and the id): measured in tests/it/storage.rs. A hash entry rather
-- than a hash per job: a 100-byte payload would push a hash past hash-max-listpack-value
-- (64) into a hashtable, about 760 bytes a job. (The idempotency key is derived:
-- queue/id/c0.)
--
-- The error histories live in 14, apart from the header, so that no transition but a
-- failure touches them and a lease never copies them. The fields of job `id` are
-- `<name>:<id>` where the name is 's' (the state: 'n,lo,bytes,dropped': errors recorded
-- so far, the lowest kept entry after the first, the JSON size of entries lo .. n, how
-- many were removed) or an entry's number k: '1' (the first error, always kept) and lo .. n
-- (the newest ones kept). Names never hold ':', so the first ':' ends the name and any id
-- (any UTF-8) gives distinct fields. The entries kept after the first are the last
-- HISTORY_LAST within HISTORY_BYTES of JSON; the newest is always kept. So a job stores at
-- most the first error, HISTORY_BYTES and the newest (each error is at most 8 KiB of
-- message and 64 KiB of details, cut by the API). Deleting a job deletes its fields (known
-- from its state field).

-- Per call. The same code runs as a script (EVAL: this file runs on every call) and as a
-- function of the jobwire library (FCALL: this file runs once, when the library loads), so
-- nothing below this block may depend on KEYS or ARGV or keep state between calls except
-- through begin_call, which every call runs first. KEYS and ARGV themselves are locals
-- declared before this file (src/store/scripts.rs).
local K_WAITING, K_DELAYED, K_ACTIVE, K_COMPLETED, K_DEAD, K_META
local K_JOBS, K_LIMITER, K_SETTLED, K_SETTLED_AT, K_CALLS, K_CALL_JOBS
local K_BODIES, K_ERRORS, K_PRIO, K_CANCELLED, K_EXPIRED, K_EXPIRY, K_DATA
-- groups.lua's keys (20 .. 28).
local K_GWAIT, K_GSEQ, K_GROUPS, K_GCONF, K_GREADY, K_GBLOCKED, K_GLIMIT, K_GPAUSE, K_GCOUNT
local K_CREATED
local WAKE_CMD, WAKE
-- `spent`: bytes read by this call (CALL_BYTES below); `group_freed`: see groups.lua.
local spent, group_freed = 0, false

-- Starts a call: its keys and arguments, and the per-call state reset.
local function begin_call(keys, argv)
  KEYS, ARGV = keys, argv
  K_WAITING, K_DELAYED, K_ACTIVE, K_COMPLETED, K_DEAD, K_META =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  K_JOBS, K_LIMITER, K_SETTLED, K_SETTLED_AT, K_CALLS, K_CALL_JOBS =
    keys[7], keys[8], keys[9], keys[10], keys[11], keys[12]
  K_BODIES, K_ERRORS, K_PRIO, K_CANCELLED, K_EXPIRED, K_EXPIRY, K_DATA =
    keys[13], keys[14], keys[15], keys[16], keys[17], keys[18], keys[19]
  K_GWAIT, K_GSEQ, K_GROUPS, K_GCONF, K_GREADY, K_GBLOCKED, K_GLIMIT, K_GPAUSE, K_GCOUNT =
    keys[20], keys[21], keys[22], keys[23], keys[24], keys[25], keys[26], keys[27], keys[28]
  K_CREATED = keys[29]
  WAKE_CMD, WAKE = string.match(argv[1], '^(%u+) (.+)$')
  spent, group_freed = 0, false
end

local HISTORY_LAST, HISTORY_BYTES, LAST_DETAILS_BYTES = 10, 65536, 2048

-- The per-call byte budget. Every job header or body a script reads is copied into Lua
-- (headers are written back, bodies only copied into replies): about 2-5 ms per MiB inside
-- Redis, measured in tests/it/script_time.rs. So a script that walks a list of jobs stops
-- taking the next one once the bytes it has read reach CALL_BYTES (it always takes the
-- first): what it did is complete, each job's change atomic, and its reply says where it
-- stopped, so the server calls again for the rest. `spent` counts the bytes read by this
-- call.
local CALL_BYTES = 1048576

local function over_budget()
  return spent >= CALL_BYTES
end

-- The header of job `id` (nil when there is none), counted in `spent`.
local function get_header(id)
  local hdr = redis.call('HGET', K_JOBS, id)
  if hdr then spent = spent + #hdr end
  return hdr
end

-- The body of job `id` ('' when there is none), counted in `spent`.
local function get_body(id)
  local body = redis.call('HGET', K_BODIES, id)
  if not body then return '' end
  spent = spent + #body
  return body
end

-- The whole record of job `id` as the server decodes it, header .. body, or nil.
local function get_record(id)
  local hdr = get_header(id)
  if not hdr then return nil end
  return hdr .. get_body(id)
end

local ST, ATT, TO, NAME, LT, TOK, WK, AD, MAX, PRI, BO, C0, RT, FT, RP, DR, ERR =
  2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18
local GRP, XA, CX = 19, 20, 21
local HEADER_VALUES, LEASE_VALUES = 20, 8

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

-- A header (string) decoded into a table (see above).
local function split_header(hdr)
  local h = { cmsgpack.unpack_limit(hdr, HEADER_VALUES, 0) }
  if h[GRP] == nil then h[GRP], h[XA], h[CX] = '', 0, 0 end
  return h
end

-- The job's header as a table, or nil when the job does not exist.
local function load_job(id)
  local hdr = get_header(id)
  if not hdr then return nil end
  return split_header(hdr)
end

local function save_job(id, h)
  redis.call('HSET', K_JOBS, id, cmsgpack.pack(unpack(h, ST, CX)))
end

-- The lease part of a header, decoded without building its table:
-- state, lease ms, name, lease token, attempt deadline ms.
local function lease_fields(hdr)
  local _, st, _, _, name, lt, tok, _, ad = cmsgpack.unpack_limit(hdr, LEASE_VALUES, 0)
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

-- Waiting-set scores (K_PRIO, see above): LEVEL * (1000 - priority) + sequence.
local LEVEL = 2 ^ 40
local ZERO_SCORE = 1000 * LEVEL

-- Filled in by groups.lua (which follows this file): push_group_ready(ids, pri, group)
-- appends jobs of a named group to its waiting jobs; group_waiting() counts the waiting jobs
-- of named groups; group_oldest_id() is the one of them made ready first (or nil).
local push_group_ready, group_waiting, group_oldest_id

-- Appends ids (a list) to the waiting jobs of priority `pri` of group `g` ('' or nil: the
-- default group), after every job already ready there.
local function push_ready(ids, pri, g)
  pri = tonumber(pri)
  if g and g ~= '' then
    push_group_ready(ids, pri, g)
    return
  end
  if pri == 0 then
    redis.call('RPUSH', K_WAITING, unpack(ids))
    return
  end
  local last = redis.call('HINCRBY', K_META, 'wseq', #ids)
  local base = (1000 - pri) * LEVEL + last - #ids
  local scored = {}
  for i, id in ipairs(ids) do
    scored[#scored + 1] = int(base + i)
    scored[#scored + 1] = id
  end
  redis.call('ZADD', K_PRIO, unpack(scored))
end

-- Puts job `id` (header h) in waiting at `now`, after every job ready at its priority.
local function make_ready(id, h, now)
  h[ST], h[RT] = 'waiting', now
  save_job(id, h)
  push_ready({ id }, h[PRI], h[GRP])
end

local function schedule(id, h, due)
  h[ST], h[RT] = 'delayed', due
  save_job(id, h)
  redis.call('ZADD', K_DELAYED, due, id)
end

-- Pops up to n waiting ids of the default group, highest priority first, FIFO within a priority: those of K_PRIO
-- scored below ZERO_SCORE (priority > 0), then the list (priority 0), then the rest of
-- K_PRIO. Returns the ids and, for each, its K_PRIO score or false (the list), for
-- unpop_ready.
local function pop_ready(n)
  local ids, scores = {}, {}
  local function from_prio(want, above_zero)
    local got = redis.call('ZRANGE', K_PRIO, 0, want - 1, 'WITHSCORES')
    local k = 0
    for i = 1, #got, 2 do
      if above_zero and tonumber(got[i + 1]) >= ZERO_SCORE then break end
      k = k + 1
      ids[#ids + 1] = got[i]
      scores[#ids] = got[i + 1]
    end
    if k > 0 then redis.call('ZREMRANGEBYRANK', K_PRIO, 0, k - 1) end
  end
  from_prio(n, true)
  if #ids < n then
    local got = redis.call('LPOP', K_WAITING, n - #ids)
    if got then
      for _, id in ipairs(got) do
        ids[#ids + 1] = id
        scores[#ids] = false
      end
    end
  end
  if #ids < n then from_prio(n - #ids, false) end
  return ids, scores
end

-- Puts ids[from ..] (popped by pop_ready, with their scores) back where they were, as if
-- they had never been popped: a K_PRIO member under its old score, a list entry back at the
-- head of the list, in order.
local function unpop_ready(ids, scores, from)
  for k = #ids, from, -1 do
    if scores[k] then
      redis.call('ZADD', K_PRIO, scores[k], ids[k])
    else
      redis.call('LPUSH', K_WAITING, ids[k])
    end
  end
end

-- The number of waiting jobs (of every group).
local function waiting_count()
  return redis.call('LLEN', K_WAITING) + redis.call('ZCARD', K_PRIO) + group_waiting()
end

-- Moves up to `limit` due delayed jobs to waiting, in due order. Returns how many.
local function promote_due(now, limit)
  local due = redis.call('ZRANGE', K_DELAYED, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  local n = 0
  for i = 1, #due, 2 do
    -- Past the byte budget the rest stay due: the caller sees a due time already passed.
    if over_budget() then break end
    local id = due[i]
    redis.call('ZREM', K_DELAYED, id)
    local h = load_job(id)
    if h and h[ST] == 'delayed' then
      make_ready(id, h, tonumber(due[i + 1]))
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

-- The state of the error history of job `id` (see above): n, lo, bytes, dropped; n = 0
-- when it has none.
local function history_state(id)
  local v = redis.call('HGET', K_ERRORS, 's:' .. id)
  if not v then return 0, 2, 0, 0 end
  local n, lo, bytes, dropped = string.match(v, '^(%d+),(%d+),(%d+),(%d+)$')
  return tonumber(n), tonumber(lo), tonumber(bytes), tonumber(dropped)
end

-- The fields of error history state v ('n,lo,bytes,dropped') of job `id`, appended to t.
local function history_fields(t, id, v)
  local n, lo = string.match(v, '^(%d+),(%d+),')
  n, lo = tonumber(n), tonumber(lo)
  t[#t + 1] = 's:' .. id
  t[#t + 1] = '1:' .. id
  for k = math.max(lo, 2), n do t[#t + 1] = k .. ':' .. id end
end

-- The error history of job `id` as { '1', entry, k, entry, ..., 'dropped', count }
-- (what src/store/codec.rs with_history decodes), read with HMGET of its known fields.
local function read_history(id)
  local n, lo, _, dropped = history_state(id)
  if n == 0 then return {} end
  local names = { '1' }
  for k = math.max(lo, 2), n do names[#names + 1] = tostring(k) end
  local fields = {}
  for i, k in ipairs(names) do fields[i] = k .. ':' .. id end
  local values = redis.call('HMGET', K_ERRORS, unpack(fields))
  local out = {}
  for i, k in ipairs(names) do
    if values[i] then
      out[#out + 1] = k
      out[#out + 1] = values[i]
    end
  end
  out[#out + 1] = 'dropped'
  out[#out + 1] = tostring(dropped)
  return out
end

-- Deletes the jobs of a list of ids (header, body, error history, data fields, expiry
-- entry), a few commands per chunk of 500.
local function delete_jobs(ids)
  for i = 1, #ids, 500 do
    local chunk = { unpack(ids, i, math.min(i + 499, #ids)) }
    redis.call('HDEL', K_JOBS, unpack(chunk))
    redis.call('HDEL', K_BODIES, unpack(chunk))
    redis.call('ZREM', K_EXPIRY, unpack(chunk))
    local data = {}
    for _, id in ipairs(chunk) do
      data[#data + 1] = 'p:' .. id
      data[#data + 1] = 'c:' .. id
      data[#data + 1] = 'r:' .. id
      data[#data + 1] = 'x:' .. id
    end
    redis.call('HDEL', K_DATA, unpack(data))
    local states = {}
    for j, id in ipairs(chunk) do states[j] = 's:' .. id end
    local v = redis.call('HMGET', K_ERRORS, unpack(states))
    local fields = {}
    for j, id in ipairs(chunk) do
      if v[j] then history_fields(fields, id, v[j]) end
    end
    for k = 1, #fields, 1000 do
      redis.call('HDEL', K_ERRORS, unpack(fields, k, math.min(k + 999, #fields)))
    end
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
    -- Cancelled and expired jobs are kept (and counted) like completed ones.
    local field = 'trimmed_completed'
    if key == K_DEAD then field = 'trimmed_dead' end
    redis.call('HINCRBY', K_META, field, removed)
  end
  return removed
end

-- Retention of completed jobs: {keep, max age ms} from the queue's meta, and whether the
-- queue has a concurrency limit (max_active: for wake_if_concurrency_limited, read in the
-- same command).
local function completed_retention()
  local m = redis.call('HMGET', K_META, 'keep_completed', 'completed_age_ms', 'max_active')
  return tonumber(m[1]) or 1000, tonumber(m[2]) or 0, m[3] ~= false
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


-- The body of job `id` without its payload: [ bin '', content type, metadata JSON ]. The
-- body is [bin payload, str, str] (src/store/codec.rs encode_body); this Lua's cmsgpack
-- cannot decode bin, so the payload is cut out by its header: 0xc4 (length in 1 byte),
-- 0xc5 (2) or 0xc6 (4), big-endian. A body of another form is returned whole.
local function light_body(id)
  local body = get_body(id)
  if string.byte(body, 1) ~= 0x93 then return body end
  local marker, skip = string.byte(body, 2), nil
  if marker == 0xc4 then
    skip = 3 + string.byte(body, 3)
  elseif marker == 0xc5 then
    local a, b = string.byte(body, 3, 4)
    skip = 4 + a * 256 + b
  elseif marker == 0xc6 then
    local a, b, c, d = string.byte(body, 3, 6)
    skip = 6 + ((a * 256 + b) * 256 + c) * 256 + d
  else
    return body
  end
  return '\147\196\0' .. string.sub(body, skip + 1)
end

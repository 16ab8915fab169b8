-- attempts.lua: the second half of the code every queue script starts with (after
-- common.lua, whose keys, record layout and helpers it uses): how an attempt ends and is
-- accounted for. Backoff, the bounded error history, failing an attempt, lease token checks,
-- the dead-set filters and walks, wake-ups after failures, repeated settles and lost lease
-- replies.

-- Cancel and expiry (issue 16). A job leaves the queue for good as CANCELLED (CancelJob,
-- CancelJobs) or EXPIRED (not leased before its expire time); both are terminal, never
-- dead-lettered (but an expired job of a queue with meta dead_letter_expired = '1' is DEAD
-- with reason EXPIRED), and kept by the completed retention in K_CANCELLED / K_EXPIRED.
-- Expiry bounds every start (issue 32): a job past its expire time (header XA) never
-- starts again. A lease takes it out of K_EXPIRY (an active job does not expire: it may
-- finish); every way back to waiting or delayed puts it back under its expire time: a
-- hand-back (hand_back: uncharged; one already past expires at the next lease or reap that
-- finds it, before it can start) and a retry (fail_attempt: one already past ends EXPIRED,
-- or DEAD with reason EXPIRED, at once; one due after it expires at the expire time, still
-- delayed). A last attempt that fails is dead-lettered with its own reason, expired or
-- not. Replay clears the expire time: a person who replays a dead job explicitly gets a run
-- (and its retries), whatever its ttl said.
-- An ACTIVE job is cancelled in two steps: the cancel sets CX (cancel-requested ms) and the
-- data field x ('<revoke ms>,<reason>'), caps its K_ACTIVE score at the revoke time (now +
-- meta cancel_grace_ms, default 30 s) and publishes 'c:...' on the wake channel (the
-- replica whose stream holds the lease sends it a CancelLease; renew.lua reports it too, as
-- a safety net). Then the first of: an Ack completes it (COMPLETED); a Fail of any
-- disposition, the reaper at the revoke time (or an earlier deadline), a release (drain)
-- or the release of its unconfirmed lease call ends it CANCELLED, uncharged and never
-- leased again (cancel_active below). A late Ack or Fail then finds the token cleared:
-- LEASE_LOST. Waiting jobs leave through remove_waiting and active ones through
-- leave_active (groups.lua, which keep the groups' counts).

-- The default cancel grace, ms (QueueConfig.cancel_grace unset).
local CANCEL_GRACE_MS = 30000

-- The cancel of job `id` (data field x): revoke ms (0 none) and reason, or nil.
local function cancel_of(id)
  local v = redis.call('HGET', K_DATA, 'x:' .. id)
  if not v then return nil end
  local revoke, reason = string.match(v, '^(%d+),(.*)$')
  return tonumber(revoke), reason
end

-- Ends job `id` (header h, already out of waiting, delayed or active) as CANCELLED at
-- `now`; the caller trims K_CANCELLED (trim_finished).
local function finish_cancelled(id, h, now)
  h[ST], h[FT], h[TOK], h[AD] = 'cancelled', now, '', 0
  if h[CX] == 0 then h[CX] = now end
  save_job(id, h)
  redis.call('ZREM', K_EXPIRY, id)
  redis.call('ZADD', K_CANCELLED, int(now), id)
end

-- Ends cancel-pending active job `id` (header h) as CANCELLED: out of K_ACTIVE, no retry,
-- no dead letter (the attempt it ran stays counted).
local function cancel_active(id, h, now)
  leave_active(id, h)
  finish_cancelled(id, h, now)
end

-- Applies the completed retention to K_CANCELLED or K_EXPIRED after `added` jobs joined it.
local function trim_finished(key, now, added)
  local keep, max_age_ms = completed_retention()
  trim(key, keep, max_age_ms, now, 100 + added, 1)
end

-- Ends job `id` (header h, already out of waiting or delayed) as EXPIRED at `now`, or DEAD
-- with reason EXPIRED when the queue dead-letters expired jobs. Returns the state.
local function expire_job(id, h, now)
  redis.call('ZREM', K_EXPIRY, id)
  h[TOK], h[AD], h[FT] = '', 0, now
  if redis.call('HGET', K_META, 'dead_letter_expired') == '1' then
    h[ST], h[DR] = 'dead', 'EXPIRED'
    save_job(id, h)
    redis.call('ZADD', K_DEAD, int(dead_score(now)), id)
    return 'dead'
  end
  h[ST] = 'expired'
  save_job(id, h)
  redis.call('ZADD', K_EXPIRED, int(now), id)
  return 'expired'
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

-- Appends one error (JSON) to the history of job `id` (common.lua: fields '<k>:<id>' and
-- the state 's:<id>'), then drops the oldest entries but the first while more than
-- HISTORY_LAST follow it or they pass HISTORY_BYTES (the newest stays), counting them. O(1)
-- a call but for the drops: no entry is decoded.
local function append_error(id, entry)
  local n, lo, bytes, dropped = history_state(id)
  n = n + 1
  redis.call('HSET', K_ERRORS, n .. ':' .. id, entry)
  if n > 1 then
    bytes = bytes + #entry
    while lo < n and (n - lo + 1 > HISTORY_LAST or bytes > HISTORY_BYTES) do
      local f = lo .. ':' .. id
      bytes = bytes - redis.call('HSTRLEN', K_ERRORS, f)
      redis.call('HDEL', K_ERRORS, f)
      lo, dropped = lo + 1, dropped + 1
    end
  end
  redis.call('HSET', K_ERRORS, 's:' .. id, n .. ',' .. lo .. ',' .. bytes .. ',' .. dropped)
end

-- Records error `e` (a table) of job `id` in its history; returns the header's copy (the
-- last error with its details cut to LAST_DETAILS_BYTES).
local function record_error(id, e)
  append_error(id, cjson.encode(e))
  local d = e.d or ''
  if #d > LAST_DETAILS_BYTES then
    -- Cut on a UTF-8 boundary (not inside a continuation byte), then mark the cut.
    local keep = LAST_DETAILS_BYTES - 40
    while keep > 0 and string.byte(d, keep + 1) >= 128 and string.byte(d, keep + 1) < 192 do keep = keep - 1 end
    e.d = string.sub(d, 1, keep) .. '\226\128\166[truncated ' .. (#d - keep) .. ' bytes]'
  end
  return '[' .. cjson.encode(e) .. ']'
end

-- Ends the current attempt of leased job `id` (header h) as failed: records the
-- error, then retries (delayed or waiting), returns the job without consuming the attempt
-- (RATE_LIMITED), or dead-letters it, all in this one script; a job that would be retried
-- past its expire time ends EXPIRED (or DEAD with reason EXPIRED) instead. `disposition` is
-- RETRY, NO_RETRY or RATE_LIMITED; `exhausted_reason` is the dead reason when no attempt
-- remains (ATTEMPTS_EXHAUSTED, LEASE_EXPIRED, TIMED_OUT).
-- Returns state, time (ready, dead or expired), dead reason ('' unless dead). A job made
-- waiting needs a wake-up: the caller PUBLISHes once for all of its jobs
-- (wake_after_failures).
local function fail_attempt(id, h, now, disposition, exhausted_reason, message, etype, details, retry_after, r)
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

  h[ERR] = record_error(id, { a = att, m = message, t = etype, d = details, w = h[WK], ts = now, x = disposition, rd = delay })
  -- A cancel is pending (attempts.lua, "Cancel and expiry"): whatever the disposition, the
  -- job ends CANCELLED, never retried (the attempt a RATE_LIMITED fail returns stays
  -- uncounted).
  if h[CX] > 0 then
    cancel_active(id, h, now)
    trim_finished(K_CANCELLED, now, 1)
    return { 'cancelled', now, '' }
  end
  h[TOK], h[AD] = '', 0
  leave_active(id, h)

  if reason ~= '' then
    h[ST], h[DR], h[FT] = 'dead', reason, now
    save_job(id, h)
    redis.call('ZADD', K_DEAD, int(dead_score(now)), id)
    trim_dead(now)
    return { 'dead', now, reason }
  end
  -- A retry never starts past the expire time ("Cancel and expiry"): past it now, the job
  -- ends here; else it is back under it, also when its retry is due later.
  if h[XA] > 0 then
    if h[XA] <= now then
      if expire_job(id, h, now) == 'dead' then
        trim_dead(now)
        return { 'dead', now, 'EXPIRED' }
      end
      trim_finished(K_EXPIRED, now, 1)
      return { 'expired', now, '' }
    end
    redis.call('ZADD', K_EXPIRY, int(h[XA]), id)
  end
  if delay > 0 then
    schedule(id, h, now + delay)
    return { 'delayed', now + delay, '' }
  end
  make_ready(id, h, now)
  return { 'waiting', now, '' }
end

-- Checks the lease token of a settle-type call (ack, fail, renew) against the header
-- `rec` of a job. Returns nil when the job is active under `token`; otherwise the reply
-- for the job: { 'NOT_FOUND' } or { 'LEASE_LOST', state }.
local function lease_refusal(rec, token)
  if not rec then return { 'NOT_FOUND' } end
  local st, _, _, tok = lease_fields(rec)
  if st ~= 'active' or tok ~= token then return { 'LEASE_LOST', st } end
  return nil
end

-- The job of a settle-type call when it is active under `token`: its header (a string);
-- otherwise nil and the refusal (see lease_refusal).
local function leased_record(id, token)
  local rec = get_header(id)
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
-- start) up to the score `upto` (inclusive; nil = '+inf'), calling visit(id, h, hdr)
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
      local hdr = get_header(id)
      local stop = false
      if hdr then
        local h = split_header(hdr)
        if matches(h, math.floor(tonumber(score) / DEAD_SCALE), filter) then
          stop = visit(id, h, hdr)
          matched = matched + 1
        end
      end
      if stop or examined >= budget or matched >= want or over_budget() then return score end
    end
  end
end

-- A concurrency-limited queue, or a group at its max_active (groups.lua, group_freed),
-- frees a slot: wake the lease loops of every replica. `limited`: whether the queue has a
-- max_active, when the caller read it already (completed_retention); nil: read here.
local function wake_if_concurrency_limited(limited)
  if limited == nil then
    limited = not group_freed and redis.call('HEXISTS', K_META, 'max_active') == 1
  end
  if group_freed or limited then
    redis.call(WAKE_CMD, WAKE, '1')
  end
end

-- After failed attempts: one wake-up when any job went back to waiting (or, on a
-- concurrency-limited queue, when a slot came free).
local function wake_after_failures(any_waiting)
  if any_waiting then
    redis.call(WAKE_CMD, WAKE, '1')
  else
    wake_if_concurrency_limited()
  end
end

-- The selection of replay.lua and delete_dead.lua: applies act(id, h) to each
-- listed id that is dead (ARGV[2] 'ids': [3] n, [4 ..] ids) or to each dead job matching the
-- filter (ARGV[2] 'filter': [3 .. 8] filter, [9] cursor, [10] max entries to examine,
-- [11] the walk's last score, '' on its first call). Returns the listed ids that were not
-- dead, the next cursor ('' = done) and the walk's last score (to pass to the next call).
-- A walk acts on what was dead when it began, so a replayed job that dies again is not
-- replayed twice by one call. (Dead scores are ms * 1000 + a sequence mod 1000: an entry
-- added in the same millisecond as the newest one when the walk began, after a sequence
-- wrap, could still fall under the bound.)
local function for_selected_dead(act)
  local skipped, cursor, upto = {}, '', ''
  if ARGV[2] == 'ids' then
    for i = 1, tonumber(ARGV[3]) do
      -- Past the byte budget: the ids not reached are in neither list; the caller sends
      -- them again.
      if i > 1 and over_budget() then break end
      local id = ARGV[3 + i]
      local h = load_job(id)
      if h and h[ST] == 'dead' then act(id, h) else skipped[#skipped + 1] = id end
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
-- unconfirmed. The server confirms the call once it has the reply (in the queue's next lease
-- call or ack-and-lease call when one comes within 20 ms, else a confirm call of its own:
-- CONFIRM_DELAY in queue_loop.rs; before a queue's loop ends; or implicitly by renewing any
-- of its leases), which deletes the record.
-- When the reply is lost, the server releases the call by id (release_call.lua, retried
-- until Redis answers): its jobs still active under its tokens go back to waiting with the
-- attempt not charged, and a tombstone makes the call lease nothing should it run later.
-- If that release cannot run (the server died), the reaper takes an unconfirmed call for
-- lost, never as failed: no attempt is charged and nothing is dead-lettered for a lease no
-- worker received. But a delivered call is unconfirmed for up to those 20 ms and the
-- confirm call's own round trip, and a lease may expire within them (a job timeout or a
-- cancel grace under them): so the reaper takes a call for lost only once it is older than
-- `lost_after` ms (reap.lua ARGV[3], from the server: twice --redis-timeout plus 1 s, which
-- covers the confirmation delay, the confirm call and one retry of it; store/leases.rs
-- lost_call_after). Until then an expired lease of the call is neither released nor failed:
-- the reaper looks at it again later (reap.lua). Once the call is old, the reaper hands back
-- (reap_call) only its leases whose own deadline has passed: a lease that still runs stays
-- with its worker. Once the call is confirmed, an expired lease is a failed attempt like any
-- other. The cost of the rule: a job whose worker got it but whose server died before
-- confirming is released uncharged when its lease expires. (The server's own release of a
-- call whose reply it knows lost, release_call.lua, still hands back every lease of it: no
-- worker got any.)

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

-- Hands active job `id` (header h) back without consuming its attempt: to waiting at once,
-- or CANCELLED when a cancel is pending (it is never leased again). Returns true when it
-- went back to waiting.
local function hand_back(id, h, now)
  h[ATT] = h[ATT] - 1
  if h[CX] > 0 then
    cancel_active(id, h, now)
    trim_finished(K_CANCELLED, now, 1)
    return false
  end
  leave_active(id, h)
  h[TOK], h[AD] = '', 0
  -- Back under its expire time ("Cancel and expiry"): one already past expires at the next
  -- lease or reap that finds it, before any lease can start it.
  if h[XA] > 0 then redis.call('ZADD', K_EXPIRY, int(h[XA]), id) end
  make_ready(id, h, now)
  return true
end

-- The active job `id` (header h) of lease call `call`, when it is still active under the
-- call's token; nil otherwise.
local function call_lease(call, id)
  local h = load_job(id)
  local prefix = call .. '-'
  if h and h[ST] == 'active' and string.sub(h[TOK], 1, #prefix) == prefix then return h end
  return nil
end

-- Hands back the lease of job `id` (header h) that no worker received: uncharged, its
-- rate-limit starts taken back (hand_back). Returns true when it went back to waiting.
local function release_lease(id, h, now)
  local tok = h[TOK]
  redis.call('ZREM', K_LIMITER, tok)
  if h[GRP] ~= '' then redis.call('ZREM', K_GLIMIT, window_member(h[GRP], h[LT], tok)) end
  -- Cancelled meanwhile: it ends CANCELLED, never leased again.
  return hand_back(id, h, now)
end

-- Forgets the record of lease call `call`.
local function forget_call(call)
  redis.call('ZREM', K_CALLS, call)
  redis.call('HDEL', K_CALL_JOBS, call)
end

-- Hands the leases of lease call `call` still active under its tokens back to waiting
-- without consuming the attempt (and their rate-limit starts), and forgets the call: its
-- reply was lost (release_call.lua). Returns how many jobs went back to waiting.
local function release_call(call, now)
  local packed = redis.call('HGET', K_CALL_JOBS, call)
  forget_call(call)
  if not packed or packed == '' then return 0 end
  local n = 0
  for _, id in ipairs(cmsgpack.unpack(packed)) do
    local h = call_lease(call, id)
    if h and release_lease(id, h, now) then n = n + 1 end
  end
  return n
end

-- The reaper's release of unconfirmed lease call `call` at `now` ("Lost lease replies"):
-- hands back, uncharged, each lease of it still active under its tokens whose own deadline
-- (K_ACTIVE score) has passed, once the call is `lost_after` ms old (its lease time, header
-- LT); the others stay with their workers, and the call's record stays, due (K_CALLS) when
-- the next of them may go. A tombstone (a call released before it ran) is forgotten once
-- its time has passed. Returns how many jobs went back to waiting.
local function reap_call(call, now, lost_after)
  local packed = redis.call('HGET', K_CALL_JOBS, call)
  if not packed or packed == '' then
    local until_ms = tonumber(redis.call('ZSCORE', K_CALLS, call))
    if not until_ms or until_ms <= now then forget_call(call) end
    return 0
  end
  local n, next_at = 0, nil
  for _, id in ipairs(cmsgpack.unpack(packed)) do
    local h = call_lease(call, id)
    if h then
      local due = tonumber(redis.call('ZSCORE', K_ACTIVE, id)) or now
      local at = math.max(due, h[LT] + lost_after)
      if at > now then
        if not next_at or at < next_at then next_at = at end
      elseif release_lease(id, h, now) then
        n = n + 1
      end
    end
  end
  if next_at then
    redis.call('ZADD', K_CALLS, int(next_at), call)
  else
    forget_call(call)
  end
  return n
end

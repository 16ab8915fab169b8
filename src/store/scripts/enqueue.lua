-- enqueue.lua: creates jobs in waiting (or delayed), or reports the existing job for an id
-- that is taken (the id is the dedupe key: nothing about the existing job changes). Options a
-- job leaves unset ('') take the queue's defaults (meta d_max, d_bo, d_to), then the server's.
-- Ids the server chose (an Enqueue without a job_id) are remembered in K_CREATED when their
-- job is created: the server retries a write whose reply it lost with the same id, and
-- that retry may run after the job it created was completed and removed (keep_completed 0,
-- DeleteJob, retention). A remembered id whose job is gone is answered 'G' (created before,
-- gone now) and never created again, whoever sends it (the server's retry, or a client
-- retrying with the id a NOT_REPLICATED error named). The last CREATED_KEEP such ids of the
-- queue are kept, each at most CREATED_TTL_MS: far past the server's retry budget (10 s).
-- ARGV: [1] wake channel, [2] n, [3] server default max attempts, then 11 per job: id, name,
--       body (the record body, see common.lua), delay ms, priority, max attempts, backoff,
--       timeout ms, group key ('' none), expire ms (0 never), '1' if the server chose the
--       id (else '').
-- Reply: { now ms, default max attempts, default backoff, default timeout ms (the queue's,
--          else the server's: what a created job left unset took), then per job 'C'
--          (created), the existing job's record (the id was taken; a record starts with a
--          MessagePack string, never 'C' or 'G') or 'G<create ms>' (a remembered id whose
--          job is gone) }; only for the first jobs when the call's byte budget (bodies
--          written and records read, common.lua) ran out: the server sends the rest again.
local CREATED_KEEP, CREATED_TTL_MS = 100000, 60000
local now = now_ms()
local n = tonumber(ARGV[2])
local d = redis.call('HMGET', K_META, 'd_max', 'd_bo', 'd_to')
local d_max, d_bo, d_to = tonumber(d[1] or ARGV[3]), d[2] or '', tonumber(d[3]) or 0
local out = { now, d_max, d_bo, d_to }
-- Ready ids by group and priority level, pushed once per level after the loop (keeps their
-- order).
local ready, levels = {}, {}
-- The created ids to remember: { now, id, now, id, ... } (ZADD's order).
local ours = {}
for j = 0, n - 1 do
  local b = 4 + j * 11
  -- Past the byte budget (common.lua) the reply is short: the server sends the rest again.
  if j > 0 and over_budget() then break end
  spent = spent + #ARGV[b + 2]
  local id = ARGV[b]
  local delay, pri = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local max, bo, to = tonumber(ARGV[b + 5]) or d_max, ARGV[b + 6], tonumber(ARGV[b + 7]) or d_to
  if bo == '' then bo = d_bo end
  local st, rt = 'waiting', now
  if delay > 0 then st, rt = 'delayed', now + delay end
  -- The header values in common.lua's order; the body beside it.
  local grp, xa = ARGV[b + 8], tonumber(ARGV[b + 9])
  local hdr = cmsgpack.pack(st, 0, to, ARGV[b + 1], 0, '', '', 0, max, pri, bo, now, rt, 0, 0, '', '', grp, xa, 0)
  local was = redis.call('ZSCORE', K_CREATED, id)
  if was and redis.call('HEXISTS', K_JOBS, id) == 0 then
    -- Created by an earlier write of this id and gone since: it exists once.
    out[#out + 1] = 'G' .. was
  elseif redis.call('HSETNX', K_JOBS, id, hdr) == 1 then
    if ARGV[b + 10] == '1' then
      ours[#ours + 1] = int(now)
      ours[#ours + 1] = id
    end
    redis.call('HSET', K_BODIES, id, ARGV[b + 2])
    -- Expiry bounds every start (attempts.lua, "Cancel and expiry").
    if xa > 0 then redis.call('ZADD', K_EXPIRY, int(xa), id) end
    if delay > 0 then
      redis.call('ZADD', K_DELAYED, rt, id)
    else
      local level = grp .. '\0' .. pri
      if not ready[level] then ready[level] = {}; levels[#levels + 1] = { level, pri, grp } end
      local ids = ready[level]
      ids[#ids + 1] = id
    end
    out[#out + 1] = 'C'
  else
    -- Taken (also by an earlier job of this batch: it stands, this one is a duplicate).
    out[#out + 1] = get_record(id)
  end
end
for _, l in ipairs(levels) do
  local ids = ready[l[1]]
  for i = 1, #ids, 1000 do push_ready({ unpack(ids, i, math.min(i + 999, #ids)) }, l[2], l[3]) end
end
if #levels > 0 then redis.call(WAKE_CMD, WAKE, '1') end
if #ours > 0 then
  for i = 1, #ours, 1000 do redis.call('ZADD', K_CREATED, unpack(ours, i, math.min(i + 999, #ours))) end
  redis.call('ZREMRANGEBYSCORE', K_CREATED, '-inf', '(' .. int(now - CREATED_TTL_MS))
  -- At most as many as were just added: the set held at most CREATED_KEEP before.
  local excess = redis.call('ZCARD', K_CREATED) - CREATED_KEEP
  if excess > 0 then redis.call('ZREMRANGEBYRANK', K_CREATED, 0, excess - 1) end
  redis.call('PEXPIRE', K_CREATED, CREATED_TTL_MS)
end
return out

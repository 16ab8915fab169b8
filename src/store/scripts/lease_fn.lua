-- lease_fn.lua: lease_jobs(n, lease_ms, call, workers) promotes due delayed jobs, then
-- leases up to n waiting jobs (highest priority, then FIFO; with named groups waiting, the groups take turns: groups.lua), each under its
-- own lease token and deadline, within the queue's limits:
-- paused leases nothing; a worker-reported throttle (throttle_until) leases nothing until
-- then; max_active caps the leased jobs; the rate limit allows at most rate_max starts in
-- any window of rate_ms (a sliding window over the limiter set of start times).
-- Every call has an id (random, made by the server); the lease token of slot i is
-- '<call id>-<i>'. A call that leases jobs records them as unconfirmed until the server
-- confirms it got the reply; a call released before it ran leases nothing (common.lua,
-- "Lost lease replies"). `workers[i]` is the worker id of slot i. Shared by lease.lua and
-- ack_lease.lua (after the acks, in the same call, with the `now` the acks read: earlier by
-- the acks' own run time, so deadlines and the rate window are that much earlier; lease.lua
-- reads the time itself).
-- Returns: { now_ms, next delayed due ms or -1, paused 0|1,
--          limited ('' | 'rate' | 'throttle' | 'concurrency' | 'group': jobs were left waiting
--          because of that limit; 'group': every group with waiting jobs is at its
--          max_active, rate limit or paused), wait until ms (when the limit next admits a
--          start; -1 unknown; for 'group' the earliest time a blocked group's rate window
--          or pause ends),
--          more 0|1 (1: the call's byte budget ran out with jobs still waiting, common.lua,
--          or jobs taken had expired: call again at once),
--          jobs expired (taken past their expire time: EXPIRED, or DEAD with reason
--          EXPIRED, without using a slot; attempts.lua, "Cancel and expiry"),
--          then three values per leased job: id, deadline, record (the header as
--          saved, then the body); the i-th job leased has the i-th token (flat: no table
--          a job), then one value per leased job, in the same order: its checkpoint (the
--          data hash's 'c:<id>', common.lua; nil when none) }
local function lease_jobs(n, lease_ms, call, workers, now)
  now = now or now_ms()
  -- The first delayed job tells whether any is due: most calls find none and promote nothing.
  local next_due = next_score(K_DELAYED)
  if next_due ~= -1 and next_due <= now then
    promote_due(now, 1000)
    next_due = next_score(K_DELAYED)
  end
  local out = { now, next_due, 0, '', -1, 0, 0 }
  -- Released before it ran (its reply was given up on): lease nothing.
  if redis.call('HEXISTS', K_CALL_JOBS, call) == 1 then return out end
  local m = redis.call('HMGET', K_META, 'paused', 'throttle_until', 'max_active', 'rate_max', 'rate_ms')
  if m[1] == '1' then
    out[3] = 1
    return out
  end
  if redis.call('EXISTS', K_WAITING, K_PRIO, K_GWAIT) == 0 then return out end
  local throttle_until = tonumber(m[2]) or 0
  if throttle_until > now then
    out[4], out[5] = 'throttle', throttle_until
    return out
  end
  local allowed = n
  local limited_by = 'rate'
  local rate_max, rate_ms = tonumber(m[4]), tonumber(m[5])
  if rate_max and rate_ms then
    redis.call('ZREMRANGEBYSCORE', K_LIMITER, '-inf', now - rate_ms)
    local free = rate_max - redis.call('ZCARD', K_LIMITER)
    if free < allowed then allowed = free end
  end
  local max_active = tonumber(m[3])
  if max_active then
    local free = max_active - redis.call('ZCARD', K_ACTIVE)
    if free < allowed then allowed, limited_by = free, 'concurrency' end
  end
  if allowed < n and allowed < waiting_count() then
    out[4] = limited_by
    if limited_by == 'rate' then
      local oldest = redis.call('ZRANGE', K_LIMITER, 0, 0, 'WITHSCORES')
      if oldest[2] then out[5] = tonumber(oldest[2]) + rate_ms end
      if allowed > 0 and out[5] == -1 then out[5] = now + rate_ms end
    end
  end
  if allowed <= 0 then return out end
  local slot = 0
  -- Numbers passed to redis.call are formatted with sprintf (about 1 µs each): the common
  -- deadline is formatted once.
  local deadline = now + lease_ms
  local deadline_s = int(deadline)
  local active = {}
  local leased = {}
  -- Whether any job of the queue has progress, a checkpoint or a result (common.lua, key 19):
  -- then each leased job's checkpoint counts in the call's byte budget like its record.
  local has_data = redis.call('HLEN', K_DATA) > 0
  local has_expiry = redis.call('EXISTS', K_EXPIRY) == 1
  local expired_n, expired_dead = 0, false
  -- Leases waiting job `id` (already out of its waiting structure) in the next slot; false
  -- when its entry was stale (the job is gone or has moved on: never expected; the entry is
  -- dropped) or when the job had expired (it ends EXPIRED here, without a slot).
  local function take(id)
    local hdr = get_header(id)
    -- Only the lease part is decoded and written anew; the rest of the header is copied as
    -- it is, and the body only read for the reply.
    local off, st, att, to, name
    if hdr then off, st, att, to, name = cmsgpack.unpack_limit(hdr, LEASE_VALUES, 0) end
    if st ~= 'waiting' then return false end
    -- A job past its expire time never starts; a leased one is out of K_EXPIRY until it
    -- comes back (attempts.lua, "Cancel and expiry").
    if has_expiry then
      local xs = redis.call('ZSCORE', K_EXPIRY, id)
      if xs then
        redis.call('ZREM', K_EXPIRY, id)
        if tonumber(xs) <= now then
          if expire_job(id, split_header(hdr), now) == 'dead' then expired_dead = true end
          expired_n = expired_n + 1
          return false
        end
      end
    end
    slot = slot + 1
    local token = call .. '-' .. slot
    local due, due_s, ad = deadline, deadline_s, 0
    if to > 0 then
      ad = now + to
      if ad < deadline then due, due_s = ad, int(ad) end
    end
    hdr = cmsgpack.pack('active', att + 1, to, name, now, token, workers[slot], ad) .. string.sub(hdr, off + 1)
    redis.call('HSET', K_JOBS, id, hdr)
    active[#active + 1] = due_s
    active[#active + 1] = id
    if rate_max and rate_ms then redis.call('ZADD', K_LIMITER, now, token) end
    leased[slot] = id
    push3(out, id, due, hdr .. get_body(id))
    if has_data then spent = spent + redis.call('HSTRLEN', K_DATA, 'c:' .. id) end
    return token
  end
  if redis.call('EXISTS', K_GWAIT) == 0 then
    -- No named group waits: the default group alone, as it always was.
    local popped, scores = pop_ready(allowed)
    for i, id in ipairs(popped) do
      -- Past the byte budget (common.lua): the popped jobs not reached go back where they
      -- were, and the reply says more are waiting.
      if slot > 0 and over_budget() then
        unpop_ready(popped, scores, i)
        out[6] = 1
        break
      end
      take(id)
    end
  else
    -- The groups take turns (groups.lua): one job at a time from the group of lowest pass.
    unblock_due_groups(now)
    local vt = group_virtual_time()
    local gd = tonumber(redis.call('HGET', K_META, 'gvd')) or 0
    local defaults = redis.call('HMGET', K_META, 'gma', 'grm', 'grp')
    -- Every turn leases a job or takes a group out of the running; a bound on the turns
    -- keeps a call short when many groups turn out blocked (the reply then says 'more').
    local turns = 0
    while slot < allowed do
      if (slot > 0 and over_budget()) or turns >= 1000 then
        out[6] = 1
        break
      end
      turns = turns + 1
      local first = redis.call('ZRANGE', K_GREADY, 0, 0, 'WITHSCORES')
      local default_waits = redis.call('EXISTS', K_WAITING, K_PRIO) > 0
      local pd = math.max(gd, vt)
      if not first[1] and not default_waits then break end
      if default_waits and (not first[1] or pd <= tonumber(first[2])) then
        local ids = pop_ready(1)
        vt, gd = pd, pd + 1
        take(ids[1])
      else
        local g, pass = first[1], tonumber(first[2])
        local weight, max_active_g, rm, rp = group_limits(g, defaults)
        local block = group_block(g, now, max_active_g, rm, rp)
        if block == 'active' then
          redis.call('ZREM', K_GREADY, g)
        elseif block then
          redis.call('ZREM', K_GREADY, g)
          redis.call('ZADD', K_GBLOCKED, block, g)
        else
          local m = redis.call('ZRANGE', K_GWAIT, '[' .. g .. '\0', '(' .. g .. '\1', 'BYLEX', 'LIMIT', 0, 1)[1]
          vt = pass
          if not m then
            -- Counted as waiting with no job left (never expected): forget the count.
            redis.call('ZREM', K_GCOUNT, g)
            redis.call('ZREM', K_GREADY, g)
          else
            redis.call('ZREM', K_GWAIT, m)
            local id = string.sub(m, #g + 22)
            redis.call('ZREM', K_GSEQ, id)
            if tonumber(redis.call('ZINCRBY', K_GCOUNT, -1, g)) <= 0 then
              redis.call('ZREM', K_GCOUNT, g)
              redis.call('ZREM', K_GREADY, g)
            else
              redis.call('ZADD', K_GREADY, num(pass + 1 / weight), g)
            end
            local token = take(id)
            if token then
              group_entered_active(g)
              if rm and rp then redis.call('ZADD', K_GLIMIT, 0, window_member(g, now, token)) end
            end
          end
        end
      end
    end
    redis.call('HSET', K_META, 'gvt', num(vt), 'gvd', num(gd))
    -- Slots left with jobs still waiting: every group that has some is blocked.
    if slot < allowed and out[6] == 0 and out[4] == '' and redis.call('EXISTS', K_GWAIT) == 1 then
      out[4] = 'group'
      local first = redis.call('ZRANGE', K_GBLOCKED, 0, 0, 'WITHSCORES')
      if first[2] then out[5] = tonumber(first[2]) end
    end
  end
  if expired_n > 0 then
    out[6], out[7] = 1, expired_n
    trim_finished(K_EXPIRED, now, expired_n)
    if expired_dead then trim_dead(now) end
  end
  if slot > 0 then
    -- The checkpoints the attempts resume from (counted in the budget above): one HMGET for
    -- the whole call, skipped when the queue's data hash is empty (no job of the queue has
    -- progress, a checkpoint or a result). Measured inside Redis on 256-job calls of 16-byte
    -- jobs: a few % of the call without checkpoints, 10-20% when a quarter to all of the
    -- jobs carry 100-byte ones.
    local k = #out
    if has_data then
      local fields = {}
      for i = 1, slot do fields[i] = 'c:' .. leased[i] end
      local cps = redis.call('HMGET', K_DATA, unpack(fields))
      for i = 1, slot do out[k + i] = cps[i] end
    else
      for i = 1, slot do out[k + i] = false end
    end
    redis.call('ZADD', K_ACTIVE, unpack(active))
    redis.call('ZADD', K_CALLS, deadline_s, call)
    redis.call('HSET', K_CALL_JOBS, call, cmsgpack.pack(leased))
  end
  return out
end

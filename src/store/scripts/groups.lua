-- groups.lua: the groups of a queue (a job's group key: a tenant, a customer), after
-- common.lua (whose keys and helpers it uses) in every queue script. It fills in the group
-- hooks common.lua declares (push_group_ready, group_waiting, group_oldest_id).
--
-- The default group '' (jobs without a group key) keeps common.lua's structures (KEYS 1
-- and 15), and the queue's own limits are its only limits. Named groups live in KEYS 20-28,
-- nine per-queue keys whatever the number of groups (Redis Cluster: a script never builds
-- a key name):
--  20 gwait    zset  the waiting jobs of named groups, every score 0, ordered by member
--                    (lex): '<group>\0<pppp><sssssssssssssss>\0<id>', pppp = 1000 - priority
--                    (4 digits), s = the job's waiting sequence (meta wseq, 15 digits).
--                    So a group's jobs are contiguous, highest priority first, FIFO within
--                    a priority, and its next job is one ZRANGE BYLEX LIMIT 0 1. Group keys
--                    hold no control character (the API refuses them), so '<group>\0' ..
--                    '<group>\1' holds exactly that group's members.
--  21 gseq     zset  id -> waiting sequence of each job in 20: rebuilds a known job's member
--                    (remove_waiting), and its lowest entry is the grouped job made ready
--                    first (the oldest-waiting age)
--  22 groups   hash  group -> its leased jobs, and '' -> the leased jobs of every named
--                    group (the default group's are the rest of 3); a field is deleted
--                    when it reaches 0
--  23 gconf    hash  a group's own config, set at run time (UpdateGroupConfig):
--                    'wt:<group>' weight, 'ma:<group>' max_active, 'rm:<group>' /
--                    'rp:<group>' rate limit (starts per period ms); absent: the queue's
--                    defaults (meta gma, grm, grp) and weight 1
--  24 gready   zset  group -> pass (stride scheduling, below): the named groups with waiting
--                    jobs that are not known to be blocked
--  25 gblocked zset  group -> ms: groups with waiting jobs blocked until then (rate window
--                    full, or paused); each lease moves the due ones back to 24
--  26 glimit   zset  the groups' rate windows, every score 0, members
--                    '<group>\0<13-digit start ms>\0<lease token>' (count with ZLEXCOUNT,
--                    trim with ZREMRANGEBYLEX, oldest with ZRANGE BYLEX LIMIT 0 1); each
--                    lease trims the group it checks, the reaper walks the rest
--  27 gpause   zset  group -> paused until ms (PauseGroup, or a RATE_LIMITED Fail with
--                    pause_group); the reaper drops entries past their time
--  28 gcount   zset  group -> its waiting jobs (entries removed at 0): the groups with
--                    waiting jobs, by backlog (ListGroups, QueueStats.top_groups)
-- A group with no waiting or leased job and no config of its own has no entry anywhere
-- (once its rate-window entries and a pause passed: the reaper drops those).
--
-- Fairness (stride scheduling): every group that can be leased has a pass; a lease takes
-- the group with the lowest pass (ties: the default group first, then by name) and adds
-- 1 / weight to it, and the queue's virtual time (meta gvt) becomes the pass it took. A
-- group that becomes eligible (gets waiting jobs, is unblocked) starts at the virtual time,
-- so it neither jumps ahead of groups that waited nor starves. The default group's pass is
-- meta gvd, read as max(gvd, gvt) (the same rule without tracking when it became
-- eligible). So groups of equal weight take turns whatever their backlogs, and a group of
-- weight 3 is leased three jobs for every one of a group of weight 1. A lease with no named
-- group waiting (gwait empty) runs common.lua's single-group path unchanged.
--
-- Limits of a named group, checked when the lease reaches it: paused (27), max_active
-- leased at once (22), the rate window (26). A group at max_active leaves 24 and comes
-- back when one of its jobs leaves active (group_left_active, which also wakes the lease
-- loops); one rate- or pause-blocked goes to 25 until its time.

-- Its keys, K_GWAIT .. K_GCOUNT (20 .. 28), are declared and set per call in common.lua.

-- A number as a score or meta value with every significant digit.
local function num(x)
  return string.format('%.17g', x)
end

-- The sort part of a gwait member: inverted priority (4 digits) and sequence (15).
local function group_sort(pri, seq)
  return string.format('%04d%015.0f', 1000 - tonumber(pri), seq)
end

local function group_virtual_time()
  return tonumber(redis.call('HGET', K_META, 'gvt')) or 0
end

-- Group g has waiting jobs: it becomes eligible at the virtual time unless it is already
-- eligible or blocked until a time (a group at max_active is added too: the lease checks
-- it and takes it out again).
local function group_eligible(g)
  if redis.call('ZSCORE', K_GBLOCKED, g) then return end
  redis.call('ZADD', K_GREADY, 'NX', num(group_virtual_time()), g)
end

-- Appends ids (a list, all of named group g, priority pri) to g's waiting jobs.
push_group_ready = function(ids, pri, g)
  local last = redis.call('HINCRBY', K_META, 'wseq', #ids)
  local members, seqs = {}, {}
  for i, id in ipairs(ids) do
    local seq = last - #ids + i
    members[#members + 1] = 0
    members[#members + 1] = g .. '\0' .. group_sort(pri, seq) .. '\0' .. id
    seqs[#seqs + 1] = int(seq)
    seqs[#seqs + 1] = id
  end
  redis.call('ZADD', K_GWAIT, unpack(members))
  redis.call('ZADD', K_GSEQ, unpack(seqs))
  redis.call('ZINCRBY', K_GCOUNT, #ids, g)
  group_eligible(g)
end

-- The number of waiting jobs of named groups.
group_waiting = function()
  return redis.call('ZCARD', K_GSEQ)
end

-- The grouped waiting job made ready first, or nil.
group_oldest_id = function()
  return redis.call('ZRANGE', K_GSEQ, 0, 0)[1]
end

-- k waiting jobs of named group g stopped waiting: when none is left, g leaves 24 and 25.
local function group_unwait(g, k)
  if tonumber(redis.call('ZINCRBY', K_GCOUNT, -k, g)) <= 0 then
    redis.call('ZREM', K_GCOUNT, g)
    redis.call('ZREM', K_GREADY, g)
    redis.call('ZREM', K_GBLOCKED, g)
  end
end

-- A leased job of named group g left active (acked, failed, reaped, released). When its
-- group has waiting jobs and was not eligible (at its max_active), sets group_freed
-- (common.lua, per call): the script wakes the lease loops (wake_if_concurrency_limited).
local function group_left_active(g)
  for _, f in ipairs({ g, '' }) do
    if redis.call('HINCRBY', K_GROUPS, f, -1) <= 0 then redis.call('HDEL', K_GROUPS, f) end
  end
  if redis.call('ZSCORE', K_GCOUNT, g) and not redis.call('ZSCORE', K_GBLOCKED, g) then
    if redis.call('ZADD', K_GREADY, 'NX', num(group_virtual_time()), g) == 1 then group_freed = true end
  end
end

-- A job of named group g was leased.
local function group_entered_active(g)
  redis.call('HINCRBY', K_GROUPS, g, 1)
  redis.call('HINCRBY', K_GROUPS, '', 1)
end

-- Job `id` (header h, state waiting) stops waiting (cancelled, deleted, expired): removes
-- it from the waiting structures of its group.
local function remove_waiting(id, h)
  local g = h[GRP]
  if g == '' then
    if tonumber(h[PRI]) == 0 then
      redis.call('LREM', K_WAITING, 1, id)
    else
      redis.call('ZREM', K_PRIO, id)
    end
    return
  end
  local seq = redis.call('ZSCORE', K_GSEQ, id)
  if not seq then return end
  redis.call('ZREM', K_GSEQ, id)
  redis.call('ZREM', K_GWAIT, g .. '\0' .. group_sort(h[PRI], tonumber(seq)) .. '\0' .. id)
  group_unwait(g, 1)
end

-- Job `id` (header h) leaves active: its entry in 3 and its group's count.
local function leave_active(id, h)
  redis.call('ZREM', K_ACTIVE, id)
  if h[GRP] ~= '' then group_left_active(h[GRP]) end
end

-- Removes up to n waiting jobs of named groups (purge, delete_queue). Returns their ids.
local function pop_group_waiting(n)
  local got = redis.call('ZRANGE', K_GWAIT, 0, n - 1)
  if #got == 0 then return {} end
  redis.call('ZREMRANGEBYRANK', K_GWAIT, 0, #got - 1)
  local ids, per = {}, {}
  for _, m in ipairs(got) do
    local g = string.match(m, '^([^%z]*)%z')
    ids[#ids + 1] = string.sub(m, #g + 22)
    per[g] = (per[g] or 0) + 1
  end
  for i = 1, #ids, 1000 do redis.call('ZREM', K_GSEQ, unpack(ids, i, math.min(i + 999, #ids))) end
  for g, k in pairs(per) do group_unwait(g, k) end
  return ids
end

-- Rate-window bounds of group g: its members are '<g>\0<13-digit ms>\0<token>'.
local function window_member(g, ms, token)
  return g .. '\0' .. string.format('%013.0f', ms) .. '\0' .. token
end

-- The limits of named group g: weight, max_active (nil: none), rate max and period ms (nil:
-- none). `defaults` is the queue's { gma, grm, grp } (meta).
local function group_limits(g, defaults)
  local c = redis.call('HMGET', K_GCONF, 'wt:' .. g, 'ma:' .. g, 'rm:' .. g, 'rp:' .. g)
  local rm, rp = tonumber(c[3]), tonumber(c[4])
  if not rm then rm, rp = tonumber(defaults[2]), tonumber(defaults[3]) end
  return tonumber(c[1]) or 1, tonumber(c[2]) or tonumber(defaults[1]), rm, rp
end

-- Why named group g cannot start a job now: nil (it can), 'active' (at max_active) or the
-- ms when it may (paused, or its rate window is full).
local function group_block(g, now, max_active, rm, rp)
  local pu = tonumber(redis.call('ZSCORE', K_GPAUSE, g))
  if pu then
    if pu > now then return pu end
    redis.call('ZREM', K_GPAUSE, g)
  end
  if max_active and (tonumber(redis.call('HGET', K_GROUPS, g)) or 0) >= max_active then
    return 'active'
  end
  if rm and rp then
    local lo, hi = '[' .. g .. '\0', '(' .. g .. '\1'
    redis.call('ZREMRANGEBYLEX', K_GLIMIT, lo, '(' .. g .. '\0' .. string.format('%013.0f', now - rp + 1))
    if redis.call('ZLEXCOUNT', K_GLIMIT, lo, hi) >= rm then
      local oldest = redis.call('ZRANGE', K_GLIMIT, lo, hi, 'BYLEX', 'LIMIT', 0, 1)[1]
      return tonumber(string.sub(oldest, #g + 2, #g + 14)) + rp
    end
  end
  return nil
end

-- Moves the blocked groups whose time came back to eligible (at most 1000 a call).
local function unblock_due_groups(now)
  local due = redis.call('ZRANGE', K_GBLOCKED, '-inf', now, 'BYSCORE', 'LIMIT', 0, 1000)
  if #due == 0 then return end
  local vt = num(group_virtual_time())
  for _, g in ipairs(due) do
    redis.call('ZREM', K_GBLOCKED, g)
    redis.call('ZADD', K_GREADY, 'NX', vt, g)
  end
end

-- Pauses named group g until `until_ms` (`exact`: PauseGroup; else until then or later, if
-- it already was: a worker's pause never shortens another): it leaves 24 for 25.
local function pause_group(g, until_ms, exact)
  local gt = 'GT'
  if exact then gt = 'CH' end
  redis.call('ZADD', K_GPAUSE, gt, until_ms, g)
  if redis.call('ZREM', K_GREADY, g) == 1 or redis.call('ZSCORE', K_GBLOCKED, g) then
    redis.call('ZADD', K_GBLOCKED, gt, until_ms, g)
  end
end

-- Resumes named group g: it becomes eligible again if it has waiting jobs.
local function resume_group(g)
  redis.call('ZREM', K_GPAUSE, g)
  if redis.call('ZREM', K_GBLOCKED, g) == 1 then
    redis.call('ZADD', K_GREADY, 'NX', num(group_virtual_time()), g)
  end
end

-- The reaper's share: drops pauses past their time and walks up to `budget` rate-window
-- entries from where the last walk stopped (meta glcur), dropping those outside their
-- group's window. Returns when the reaper should come back (ms; -1: nothing left).
local function trim_groups(now, budget)
  redis.call('ZREMRANGEBYSCORE', K_GPAUSE, '-inf', now)
  local due = -1
  local next_pause = redis.call('ZRANGE', K_GPAUSE, 0, 0, 'WITHSCORES')[2]
  if next_pause then due = tonumber(next_pause) end
  local from = redis.call('HGET', K_META, 'glcur') or '-'
  local got = redis.call('ZRANGE', K_GLIMIT, from, '+', 'BYLEX', 'LIMIT', 0, budget)
  local defaults = redis.call('HMGET', K_META, 'gma', 'grm', 'grp')
  local periods = {}
  for _, m in ipairs(got) do
    local g = string.match(m, '^([^%z]*)%z')
    if periods[g] == nil then
      local _, _, _, rp = group_limits(g, defaults)
      periods[g] = rp or 0
    end
    if tonumber(string.sub(m, #g + 2, #g + 14)) <= now - periods[g] then
      redis.call('ZREM', K_GLIMIT, m)
    end
  end
  if #got < budget then
    redis.call('HDEL', K_META, 'glcur')
    if redis.call('EXISTS', K_GLIMIT) == 1 then
      if due < 0 or now + 10000 < due then due = now + 10000 end
    end
  else
    redis.call('HSET', K_META, 'glcur', '(' .. got[#got])
    due = now
  end
  return due
end

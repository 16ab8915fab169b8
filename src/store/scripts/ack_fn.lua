-- ack_fn.lua: ack_jobs(n, base) completes leased jobs whose lease token matches, then applies the completed
-- retention: with keep_completed 0 a completed job is deleted at once (BullMQ's
-- removeOnComplete), otherwise it joins the completed set, trimmed to keep_completed entries
-- and completed_age_ms. A kept job keeps the result its ack carries ('r:<id>' of the data
-- hash, common.lua), beside its progress and checkpoint.
-- Its arguments start at ARGV[base]: per job (n of them): id, lease token; then, when some
-- acks carry a result, [base + 2n] m, then m pairs: the job's index in the list (0-based),
-- result. Shared by ack.lua and ack_lease.lua.
-- An ack repeated with the token of an ack already applied (its reply was lost) answers
-- 'DONE' and changes nothing (attempts.lua, "Repeated settles"), also when both are in
-- this call.
-- Returns: { now ms, then three values per job (for the first jobs only, when the call's byte
--          budget ran out: common.lua): 'OK', lease ms, name
--                                           | 'DONE', 0, ''
--                                           | 'NOT_FOUND', 0, ''
--                                           | 'LEASE_LOST', 0, state } (flat: no table a job)
local function ack_jobs(n, base)
  local now = now_ms()
  local keep, max_age_ms, limited = completed_retention()
  local out = { now }
  local done, finished, remembered = {}, {}, {}
  -- Named groups with leased jobs (groups.lua): then each job's group is read from its header.
  local grouped = redis.call('EXISTS', K_GROUPS) == 1
  local results = {}
  for k = 0, (tonumber(ARGV[base + n * 2]) or 0) - 1 do
    results[tonumber(ARGV[base + 1 + n * 2 + k * 2])] = ARGV[base + 2 + n * 2 + k * 2]
  end
  for j = 0, n - 1 do
    -- Past the byte budget (common.lua) the reply is short: the server sends the rest again.
    if j > 0 and over_budget() then break end
    local id, token = ARGV[base + j * 2], ARGV[base + 1 + j * 2]
    if finished[id] == token then
      -- The same ack twice in this call (a retry coalesced with the one it repeats).
      push3(out, 'DONE', 0, '')
    elseif finished[id] then
      push3(out, 'LEASE_LOST', 0, 'completed')
    else
      -- Only the header is read (never the body).
      local rec = get_header(id)
      local st, lt, name, tok
      if rec then st, lt, name, tok = lease_fields(rec) end
      if (not rec or st ~= 'active' or tok ~= token) and settled_outcome(token) == 'A' then
        push3(out, 'DONE', 0, '')
      elseif not rec then
        push3(out, 'NOT_FOUND', 0, '')
      elseif st ~= 'active' or tok ~= token then
        push3(out, 'LEASE_LOST', 0, st)
      else
        remembered[#remembered + 1] = token
        remembered[#remembered + 1] = 'A'
        finished[id] = token
        done[#done + 1] = id
        local h
        if keep > 0 or grouped then h = split_header(rec) end
        if grouped and h[GRP] ~= '' then group_left_active(h[GRP]) end
        if keep > 0 then
          h[ST], h[FT], h[TOK], h[AD] = 'completed', now, '', 0
          save_job(id, h)
          if results[j] then redis.call('HSET', K_DATA, 'r:' .. id, results[j]) end
        end
        push3(out, 'OK', lt, name)
      end
    end
  end
  local now_s = int(now)
  for i = 1, #done, 1000 do
    local ids = { unpack(done, i, math.min(i + 999, #done)) }
    redis.call('ZREM', K_ACTIVE, unpack(ids))
    if keep > 0 then
      local scored = {}
      for _, id in ipairs(ids) do scored[#scored + 1] = now_s; scored[#scored + 1] = id end
      redis.call('ZADD', K_COMPLETED, unpack(scored))
    else
      delete_jobs(ids)
    end
  end
  remember_settled(remembered, now)
  if #done > 0 then
    trim_completed(now, #done, keep, max_age_ms)
    wake_if_concurrency_limited(limited)
  end
  return out
end

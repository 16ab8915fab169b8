-- cancel.lua: cancels one job by id, or the WAITING, DELAYED and ACTIVE jobs of the queue
-- that match a filter (attempts.lua, "Cancel and expiry"). A waiting or delayed job ends
-- CANCELLED at once; an active one gets a pending cancel (CX, data x, its K_ACTIVE score
-- capped at the revoke time now + meta cancel_grace_ms) and its holder is told over the
-- wake channel with the message 'c:<revoke ms>:<lease token>:<id bytes>:<id><reason>'
-- (src/store/wake.rs decodes it). A job already finished, or whose cancel is pending, is
-- left as it is.
-- ARGV: [1] wake channel, [2] reason, [3] 'id' | 'filter';
--   id:     [4] the job's id
--   filter: [4] name, [5] group key, [6] metadata key ('' = any, at least one set),
--           [7] metadata value given 1|0, [8] metadata value, [9] most jobs to cancel or
--           signal, [10] cursor phase ('' = start; 'd' delayed, 'h' waiting of priority
--           > 0, 'l' waiting of priority 0, 'w' waiting of priority < 0, 'g' waiting of
--           named groups (groups.lua), 'a' active),
--           [11] cursor position (entries of that phase kept before it), [12] most entries
--           to examine
-- Reply: id:     { 'NOT_FOUND' } | { outcome, record (header .. body), revoke ms, token }
--                where outcome is 'CANCELLED' (was waiting or delayed), 'SIGNALLED' (was
--                active: its holder is told), 'PENDING' (active, a cancel was already
--                pending) or 'FINISHED' (already finished: unchanged)
--        filter: { cancelled ids, signalled ids, next phase ('' = done), next position,
--                  earliest revoke ms or -1 }
-- The filter walk goes by rank within each phase (the entries it kept, rather than those
-- it removed, move the cursor): jobs that move while a walk goes on between calls may be
-- visited twice (harmless: a second cancel does nothing) or missed by that walk.
local now = now_ms()
local reason = ARGV[2]
local grace = meta_number('cancel_grace_ms', CANCEL_GRACE_MS)
local cancelled_any = false

-- Cancels job `id` (header h): outcome, revoke ms, token (see the reply above).
local function cancel_one(id, h)
  local st = h[ST]
  if st == 'waiting' or st == 'delayed' then
    if st == 'waiting' then
      remove_waiting(id, h)
    else
      redis.call('ZREM', K_DELAYED, id)
    end
    redis.call('HSET', K_DATA, 'x:' .. id, '0,' .. reason)
    h[CX] = now
    finish_cancelled(id, h, now)
    cancelled_any = true
    return 'CANCELLED', 0, ''
  elseif st == 'active' then
    if h[CX] > 0 then
      local revoke = cancel_of(id)
      return 'PENDING', revoke or 0, h[TOK]
    end
    local revoke = now + grace
    h[CX] = now
    save_job(id, h)
    redis.call('HSET', K_DATA, 'x:' .. id, int(revoke) .. ',' .. reason)
    redis.call('ZADD', K_ACTIVE, 'LT', int(revoke), id)
    redis.call(WAKE_CMD, WAKE, 'c:' .. int(revoke) .. ':' .. h[TOK] .. ':' .. #id .. ':' .. id .. reason)
    return 'SIGNALLED', revoke, h[TOK]
  end
  return 'FINISHED', 0, ''
end

if ARGV[3] == 'id' then
  local id = ARGV[4]
  local h = load_job(id)
  if not h then return { 'NOT_FOUND' } end
  local outcome, revoke, token = cancel_one(id, h)
  local rec = get_record(id)
  if cancelled_any then trim_finished(K_CANCELLED, now, 1) end
  return { outcome, rec, revoke, token }
end

local name, group, mkey = ARGV[4], ARGV[5], ARGV[6]
local has_value, mvalue = ARGV[7] == '1', ARGV[8]
local limit, phase, pos, max_examined = tonumber(ARGV[9]), ARGV[10], tonumber(ARGV[11]) or 0, tonumber(ARGV[12])
local cancelled, signalled = {}, {}
local earliest = -1
local examined = 0

-- Does job `id` (header string hdr) match the filter? Returns its header table too.
local function matches_filter(id, hdr)
  local h = split_header(hdr)
  if name ~= '' and h[NAME] ~= name then return false, h end
  if group ~= '' and h[GRP] ~= group then return false, h end
  if mkey ~= '' then
    local light = light_body(id)
    local _, meta = cmsgpack.unpack(string.sub(light, 4))
    if not meta or meta == '' then return false, h end
    local ok, m = pcall(cjson.decode, meta)
    if not ok or type(m) ~= 'table' then return false, h end
    local v = m[mkey]
    if v == nil then return false, h end
    if has_value and v ~= mvalue then return false, h end
  end
  return true, h
end

-- Visits job `id` (its index entry says it is in `state`). Returns true when it was taken
-- out of that index.
local function visit(id, state)
  examined = examined + 1
  local hdr = get_header(id)
  if not hdr then return false end
  local ok, h = matches_filter(id, hdr)
  if not ok or h[ST] ~= state then return false end
  local outcome, revoke = cancel_one(id, h)
  if outcome == 'CANCELLED' then
    cancelled[#cancelled + 1] = id
    return true
  elseif outcome == 'SIGNALLED' then
    signalled[#signalled + 1] = id
    if earliest < 0 or revoke < earliest then earliest = revoke end
  end
  return false
end

local function full()
  return #cancelled + #signalled >= limit or examined >= max_examined or over_budget()
end

-- Walks phase `ph` from position pos; true when the page ended inside it.
local function walk(ph)
  while true do
    local chunk
    if ph == 'd' then
      chunk = redis.call('ZRANGE', K_DELAYED, pos, pos + 199)
    elseif ph == 'a' then
      chunk = redis.call('ZRANGE', K_ACTIVE, pos, pos + 199)
    elseif ph == 'l' then
      chunk = redis.call('LRANGE', K_WAITING, pos, pos + 199)
    elseif ph == 'g' then
      chunk = {}
      for _, m in ipairs(redis.call('ZRANGE', K_GWAIT, pos, pos + 199)) do
        -- Members are '<group>\0<sort>\0<id>' (groups.lua).
        chunk[#chunk + 1] = string.match(m, '^[^%z]*%z[^%z]*%z(.*)$') or ''
      end
    elseif ph == 'h' then
      chunk = redis.call('ZRANGE', K_PRIO, '-inf', '(' .. int(ZERO_SCORE), 'BYSCORE', 'LIMIT', pos, 200)
    else
      chunk = redis.call('ZRANGE', K_PRIO, int(ZERO_SCORE), '+inf', 'BYSCORE', 'LIMIT', pos, 200)
    end
    if #chunk == 0 then return false end
    -- Entries removed from the index shift the rest down: re-read from pos after them.
    local removed = false
    for _, id in ipairs(chunk) do
      local state = 'waiting'
      if ph == 'd' then state = 'delayed' elseif ph == 'a' then state = 'active' end
      if visit(id, state) then removed = true else pos = pos + 1 end
      if full() then return true end
    end
    if not removed and #chunk < 200 then return false end
  end
end

local phases = { 'd', 'h', 'l', 'w', 'g', 'a' }
local started = phase == ''
local next_phase = ''
for _, ph in ipairs(phases) do
  if not started and ph == phase then started = true end
  if started then
    if walk(ph) then
      next_phase = ph
      break
    end
    pos = 0
  end
end
if next_phase == '' then pos = 0 end
if cancelled_any then trim_finished(K_CANCELLED, now, #cancelled) end
return { cancelled, signalled, next_phase, pos, earliest }

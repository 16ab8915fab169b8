-- list_jobs.lua: reads a page of a queue's jobs in one state, in the order of the state's
-- index, filtered by name and by the time that orders the index (see common.lua for the
-- keys). Read-only (the no-writes flag, put first by src/store/scripts.rs).
--   waiting    the default group's jobs in lease order: K_PRIO below ZERO_SCORE
--              (priority > 0), then the list (priority 0), then K_PRIO from ZERO_SCORE
--              (priority < 0); then the named groups' jobs in the order they became ready
--              (KEYS 21, groups.lua; whatever their group and priority); the time is the
--              ready time of the header (not indexed: a time filter examines every job)
--   delayed    K_DELAYED by due time; active K_ACTIVE by lease deadline; completed
--              K_COMPLETED by finish time; dead K_DEAD by death time (score / DEAD_SCALE);
--              cancelled K_CANCELLED and expired K_EXPIRED by finish time
-- A sorted set is walked in (score, id) order, as Redis sorts it; the cursor is the last
-- job examined: its score and id (the walk goes on strictly after them, from its rank when
-- it is still there under that score, else from the score). The list (priority 0) is a
-- FIFO between scripts: ids leave only from its head (pop_ready; LPUSH only puts back, in
-- the same script, what that script popped) and join at its tail. So its cursor is the last
-- id examined and its index then: the id is now at that index or before it (LPOS within the
-- first index + 1 entries); when it is gone, so is everything before it, and the walk goes
-- on from the head. Neither cursor lists a job twice or skips one that stayed in place.
-- ARGV: [1] wake channel (unused), [2] state, [3] cursor segment ('' = start; 'z' for a
--       sorted-set state; 'hi', 'l', 'lo' or 'g' for waiting), [4] cursor score or list index,
--       [5] cursor id, [6] page size, [7] max entries to examine, [8] byte budget of the
--       page, [9] name ('' = any), [10] after ms, [11] before ms (-1 = unbounded)
-- Reply: { segment ('' = done), score or index, id, { id, record, progress }, ... } where a
-- record is the header and the body without its payload (what src/store/codec.rs decodes)
-- and progress the job's progress entry of the data hash (common.lua; nil when none):
-- neither its checkpoint nor its result, which GetJob returns.
local state = ARGV[2]
local seg, pos, cid = ARGV[3], ARGV[4], ARGV[5]
local want, budget, bytes = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local name, after, before = ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11])
local out = { '', '', '' }
local examined, taken = 0, 0

-- a <= b, byte by byte (as Redis orders the members of a sorted set; Lua's own string
-- comparison follows the locale).
local function bytes_le(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end

-- Examines job `id` (its index entry says it is in `state`; `time_check` when the time
-- filter is not done by the index). Returns true when the page is over.
local function visit(id, time_check)
  examined = examined + 1
  local hdr = get_header(id)
  if hdr then
    local st, _, jname = lease_fields(hdr)
    local ok = st == state and (name == '' or jname == name)
    if ok and time_check and (after >= 0 or before >= 0) then
      local rt = split_header(hdr)[RT]
      ok = (after < 0 or rt >= after) and (before < 0 or rt < before)
    end
    if ok then
      out[#out + 1] = { id, hdr .. light_body(id), redis.call('HGET', K_DATA, 'p:' .. id) }
      taken = taken + 1
    end
  end
  return taken >= want or examined >= budget or spent >= bytes
end

-- Walks sorted set `key` in (score, id) order from after the cursor (cs, cid; cs = nil:
-- from the start) over scores in [lo, hi) (numbers; nil = unbounded). Returns the
-- cursor score and id of the last entry examined when the page ended, or nil when the
-- range is exhausted.
local function walk_zset(key, cs, cur_id, lo, hi, time_check)
  local rank = 0
  if lo then rank = redis.call('ZCOUNT', key, '-inf', '(' .. int(lo)) end
  local skip_score = nil
  if cs and (not lo or cs >= lo) then
    local now_score = redis.call('ZSCORE', key, cur_id)
    if now_score and tonumber(now_score) == cs then
      rank = redis.call('ZRANK', key, cur_id) + 1
    else
      -- The cursor's job left (or moved): go on from its score, after its id there.
      rank = redis.call('ZCOUNT', key, '-inf', '(' .. int(cs))
      skip_score = cs
    end
  end
  while true do
    local chunk = redis.call('ZRANGE', key, rank, rank + 199, 'WITHSCORES')
    if #chunk == 0 then return nil end
    for i = 1, #chunk, 2 do
      local id, score = chunk[i], tonumber(chunk[i + 1])
      if hi and score >= hi then return nil end
      if not (skip_score and score == skip_score and bytes_le(id, cur_id)) then
        skip_score = nil
        if visit(id, time_check) then return score, id end
      end
    end
    rank = rank + 200
  end
end

-- Walks the waiting list from after the cursor (index i, id; i = nil: from the head).
-- Returns the index and id of the last entry examined when the page ended, or nil.
local function walk_list(i, cur_id)
  local start = 0
  if i then
    if redis.call('LINDEX', K_WAITING, i) == cur_id then
      start = i + 1
    else
      local p = redis.call('LPOS', K_WAITING, cur_id, 'MAXLEN', i + 1)
      if p then start = p + 1 end
    end
  end
  while true do
    local chunk = redis.call('LRANGE', K_WAITING, start, start + 199)
    if #chunk == 0 then return nil end
    for k, id in ipairs(chunk) do
      if visit(id, true) then return start + k - 1, id end
    end
    start = start + #chunk
  end
end

local function num(s)
  if s == '' then return nil end
  return tonumber(s)
end

if state == 'waiting' then
  local a, b
  if seg == '' or seg == 'hi' then
    a, b = walk_zset(K_PRIO, num(pos), cid, nil, ZERO_SCORE, true)
    if a then
      out[1], out[2], out[3] = 'hi', int(a), b
      return out
    end
    seg, pos = 'l', ''
  end
  if seg == 'l' then
    a, b = walk_list(num(pos), cid)
    if a then
      out[1], out[2], out[3] = 'l', tostring(a), b
      return out
    end
    seg, pos = 'lo', ''
  end
  if seg == 'lo' then
    a, b = walk_zset(K_PRIO, num(pos), cid, ZERO_SCORE, nil, true)
    if a then
      out[1], out[2], out[3] = 'lo', int(a), b
      return out
    end
    seg, pos = 'g', ''
  end
  a, b = walk_zset(K_GSEQ, num(pos), cid, nil, nil, true)
  if a then out[1], out[2], out[3] = 'g', int(a), b end
  return out
end

local key, scale = K_DELAYED, 1
if state == 'active' then key = K_ACTIVE
elseif state == 'completed' then key = K_COMPLETED
elseif state == 'dead' then key, scale = K_DEAD, DEAD_SCALE
elseif state == 'cancelled' then key = K_CANCELLED
elseif state == 'expired' then key = K_EXPIRED end
local lo, hi
if after >= 0 then lo = after * scale end
if before >= 0 then hi = before * scale end
local a, b = walk_zset(key, num(pos), cid, lo, hi, false)
if a then out[1], out[2], out[3] = 'z', int(a), b end
return out

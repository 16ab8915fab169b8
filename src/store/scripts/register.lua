-- register.lua: adds queue names to the registry unless that would take it past the
-- server's queue limit (not a queue script: it touches only the registry).
-- KEYS: [1] the registry (set of queue names).
-- ARGV: [1] most queues, [2 ..] names (distinct).
-- Reply: { 1, queues now } when every name is registered (added or known before),
--        { 0, queues now } when the new names would pass the limit (nothing added).
local max = tonumber(ARGV[1])
local new = {}
for i = 2, #ARGV do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 0 then new[#new + 1] = ARGV[i] end
end
local n = redis.call('SCARD', KEYS[1])
if #new == 0 then return { 1, n } end
if n + #new > max then return { 0, n } end
redis.call('SADD', KEYS[1], unpack(new))
return { 1, n + #new }

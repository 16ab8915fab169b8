-- set_meta.lua: changes a queue's config or state fields in its meta hash, all at once, and
-- wakes the lease loops of every replica (a resume or a raised limit may admit jobs now).
-- ARGV: [1] wake channel, [2 ..] field, value pairs; an empty value deletes the field.
-- Reply: the number of fields changed.
for i = 2, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', K_META, ARGV[i])
  else
    redis.call('HSET', K_META, ARGV[i], ARGV[i + 1])
  end
end
redis.call(WAKE_CMD, WAKE, '1')
return (#ARGV - 1) / 2

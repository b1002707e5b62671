-- Set or delete one hash field only if it still holds the value the caller read: a
-- compare-and-set on one key, so in one slot of a Redis Cluster, where a WATCH'd
-- transaction cannot be had (the periodic entries: periodic/registry.py, whose versions
-- only go forward).
--
-- KEYS[1]  the hash
-- ARGV[1]  the field
-- ARGV[2]  the value read ('': none)
-- ARGV[3]  the new value ('': delete the field)
-- Returns  1 when set (or deleted); 0 when the field held another value: nothing written

local found = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if found ~= ARGV[2] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1

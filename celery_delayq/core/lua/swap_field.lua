-- Set or delete one hash field only if it still holds the value the caller read: a
-- compare-and-set on one key, so in one slot of a Redis Cluster, where a WATCH'd
-- transaction cannot be had (the periodic entries: periodic/registry.py, whose versions
-- only go forward). With a second key, the change's record goes in with it: pushed on
-- that list, which is cut to its newest ARGV[5] records and expires ARGV[6] ms after
-- its last record (periodic/audit/changelog.py; core/layout/keys.py puts it in the slot
-- of the first key).
--
-- KEYS[1]  the hash
-- KEYS[2]  (optional) the field's change log, a list, newest first
-- ARGV[1]  the field
-- ARGV[2]  the value read ('': none)
-- ARGV[3]  the new value ('': delete the field)
-- ARGV[4]  (with KEYS[2]) the change's record
-- ARGV[5]  (with KEYS[2]) how many records the log keeps
-- ARGV[6]  (with KEYS[2]) how long the log lives after its last record, in ms
-- Returns  1 when set (or deleted); 0 when the field held another value: nothing written

local found = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if found ~= ARGV[2] then return 0 end
if KEYS[2] then
  -- a key of that name of another type (made by other code) would fail the LPUSH after
  -- the change is written: the log starts anew instead (UNLINK: freed aside, at any size)
  local kind = redis.call('TYPE', KEYS[2]).ok
  if kind ~= 'list' and kind ~= 'none' then redis.call('UNLINK', KEYS[2]) end
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
if KEYS[2] then
  redis.call('LPUSH', KEYS[2], ARGV[4])
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return 1

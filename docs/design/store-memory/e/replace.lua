-- ARGV[3] message key (task key or dup key)  ARGV[4] record as read  ARGV[5] new record
-- ARGV[6] new due ms (== the new record's due)  ARGV[7] wake-up channel
-- Returns 1 when replaced, 0 when moved/cancelled/changed meanwhile.
local k = ARGV[3]
local rec = redis.call('HGET', MSG, k)
if rec ~= ARGV[4] then return 0 end
local due = parse(rec)
if not due or remove_entry(k, due) == 0 then return 0 end
add_entry(k, ARGV[6])
redis.call('HSET', MSG, k, ARGV[5])
if head() == k then redis.call('PUBLISH', ARGV[7], ARGV[6]) end
return 1

-- return_landed.lua: put back, at the head of their queues, the messages that consumers now
-- gone had moved off a queue with BLMOVE but not yet taken (consume.py). A consumer
-- holds a lease while it lives; its landing lists are listed in a set while they may hold
-- anything.
--
-- KEYS[1]  the set of landing lists; a member is a consumer's id (32 hex digits) followed by
--          the Redis key of the queue list it waits on
-- ARGV[1]  the key prefix of the consumers' leases (+ consumer id)
-- ARGV[2]  the key prefix of the landing lists (+ member)
--
-- Returns how many messages went back. The leases and landing lists are keys this script
-- names itself: the broker is one Redis (or a Sentinel-managed one), never a cluster.

local returned = 0
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local consumer, queue_list = string.sub(member, 1, 32), string.sub(member, 33)
  if redis.call('EXISTS', ARGV[1] .. consumer) == 0 then
    local landing = ARGV[2] .. member
    while redis.call('LMOVE', landing, queue_list, 'RIGHT', 'RIGHT') do
      returned = returned + 1
    end
    redis.call('SREM', KEYS[1], member)
  end
end
return returned

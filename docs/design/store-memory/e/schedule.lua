-- KEYS[5] P:queues
-- ARGV[3] task key  ARGV[4] due ms  ARGV[5] record tail "[d<len>:<dest>]:<payload>"
-- ARGV[6] queue name  ARGV[7] wake-up channel
-- Returns 1 when the message became the queue's earliest (movers woken), else 0.
local k, due = ARGV[3], ARGV[4]
if redis.call('HSETNX', MSG, k, due .. ARGV[5]) == 0 then
  local seq = redis.call('HINCRBY', STATS, 'dup_seq', 1)
  local seqs = redis.call('HGET', DUP, k)
  redis.call('HSET', DUP, k, seqs and (seqs .. ' ' .. seq) or seq)
  k = '\255' .. seq .. ':' .. k
  redis.call('HSET', MSG, k, due .. ARGV[5])
end
add_entry(k, due)
redis.call('SADD', KEYS[5], ARGV[6])
redis.call('HINCRBY', STATS, 'scheduled', 1)
if head() == k then redis.call('PUBLISH', ARGV[7], due); return 1 end
return 0

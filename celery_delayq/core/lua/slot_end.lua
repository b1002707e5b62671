-- Give back a task's concurrency slot as it ends (returned, failed, retried, revoked:
-- worker/flow/running_slots.py), and make its bucket ready at once when messages wait in it
-- and a slot is free: without this the movers would sleep until the first lease's end
-- (gates.lua's allowed_at). Only a score in the future is brought forward, to now, and
-- the movers woken; the release judges the bucket's other limits again (a rate that
-- holds it puts the score back), and a paused bucket (+inf) stays paused.
--
-- KEYS[1]  P:{Q}:fc:r:<bucket>  zset  message key -> end (ms) of its slot's lease
-- KEYS[2]  P:{Q}:fc:s:<bucket>  hash  the bucket's state: 'spec' holds c<most>/<lease ms>
-- KEYS[3]  P:{Q}:fc:w:<bucket>  list  the messages waiting in the bucket
-- KEYS[4]  P:{Q}:fc:ready       zset  bucket -> when (us) it may release
-- ARGV[1]  the message key
-- ARGV[2]  the bucket
-- ARGV[3]  the movers' wake-up channel
-- Returns  {1 when the slot was held and is given back else 0, 1 when the movers were
--           woken else 0}

local RUNNING, STATE, WAITING, BUCKETS_READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, bucket = ARGV[1], ARGV[2]

if redis.call('TYPE', RUNNING).ok ~= 'zset' then return {0, 0} end
local ended = redis.call('ZREM', RUNNING, member)
if redis.call('TYPE', STATE).ok ~= 'hash' or redis.call('TYPE', WAITING).ok ~= 'list'
    or redis.call('TYPE', BUCKETS_READY).ok ~= 'zset' then
  return {ended, 0}
end
local most = tonumber(string.match(',' .. (redis.call('HGET', STATE, 'spec') or '') .. ',',
                                   ',c(%d+)/%d+,'))
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
redis.call('ZREMRANGEBYSCORE', RUNNING, '-inf', now_ms)  -- dead workers' slots
if not most or redis.call('ZCARD', RUNNING) >= most then return {ended, 0} end
local at = tonumber(redis.call('ZSCORE', BUCKETS_READY, bucket))  -- nil: nothing waits
if not at or at <= now_us or at == math.huge then return {ended, 0} end
redis.call('ZADD', BUCKETS_READY, string.format('%d', now_us), bucket)
redis.call('PUBLISH', ARGV[3], now_ms)
return {ended, 1}

-- Hold one running task's concurrency slot (gates.lua): a worker calls it as the task
-- starts ("take") and, every third of the lease, for each task it holds, reserved or
-- running ("renew"; worker/flow/running_slots.py). The slot's member is the message's key;
-- the lease, and whether the bucket has a concurrency limit at all, are read from the
-- bucket's spec (a crafted header cannot lengthen a lease, nor make slots in a bucket
-- the store did not gate).
--
-- "take" keeps the message's slot if the release's is still held (a message delivered
-- again after its worker died runs in the dead one's slot: the same message, once), else
-- takes a free one; with none free it takes nothing (the worker sends the message back
-- to wait in its bucket). "renew" only moves the end of a slot still held: a slot
-- ended, or whose lease ran out, stays ended.
--
-- KEYS[1]  P:{Q}:fc:r:<bucket>  zset  message key -> end (ms) of its slot's lease
-- KEYS[2]  P:{Q}:fc:s:<bucket>  hash  the bucket's state: 'spec' holds c<most>/<lease ms>
-- KEYS[3]  P:{Q}:fc:index       zset  bucket -> when (ms) its state stops mattering
--                                     (gates.lua): raised to the slot's lease end if
--                                     lower (a key of another type is left alone)
-- ARGV[1]  the message key
-- ARGV[2]  "take" or "renew"
-- ARGV[3]  the bucket
-- Returns  {what happened, the lease (ms; 0: the bucket has no concurrency limit)}:
--          0 nothing (no limit, no slot held to renew, or keys of another type),
--          1 the slot was held and is renewed, 2 a free one taken, 3 none free: none taken

local RUNNING, STATE, INDEX = KEYS[1], KEYS[2], KEYS[3]
local member, take = ARGV[1], ARGV[2] == 'take'
local DAY_MS = 86400 * 1000

if redis.call('TYPE', STATE).ok ~= 'hash' then return {0, 0} end
local kind = redis.call('TYPE', RUNNING).ok
if kind ~= 'zset' and kind ~= 'none' then return {0, 0} end
local most, lease = string.match(',' .. (redis.call('HGET', STATE, 'spec') or '') .. ',',
                                 ',c(%d+)/(%d+),')
most, lease = tonumber(most), tonumber(lease)
if not most or not lease or lease <= 0 or lease > DAY_MS then return {0, 0} end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = string.format('%d', now + lease)
local held = redis.call('ZSCORE', RUNNING, member)
held = held and tonumber(held) > now
local outcome = 1
if not held then
  if not take then
    redis.call('ZREM', RUNNING, member)  -- its lease ran out: gone, as allowed_at drops it
    return {0, lease}
  end
  redis.call('ZREMRANGEBYSCORE', RUNNING, '-inf', now)  -- dead workers' slots
  if redis.call('ZCARD', RUNNING) >= most then return {3, lease} end
  outcome = 2
end
redis.call('ZADD', RUNNING, ends, member)
redis.call('PEXPIRE', RUNNING, lease + DAY_MS)  -- a crafted bucket's slots do not stay
kind = redis.call('TYPE', INDEX).ok
if ARGV[3] and (kind == 'zset' or kind == 'none') then  -- the reader finds it while it runs
  local indexed = tonumber(redis.call('ZSCORE', INDEX, ARGV[3]))
  if not indexed or indexed < now + lease then redis.call('ZADD', INDEX, ends, ARGV[3]) end
end
return {outcome, lease}

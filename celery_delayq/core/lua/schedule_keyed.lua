-- Store one delayed message under a delay key (after prelude.lua): while a message with
-- the same key is pending in this queue (shard), the new one replaces it, is dropped, or
-- is refused, in this one atomic call (keyed.py explains the modes).
--
-- KEYS[5]  P:queues  set  as in schedule.lua (left out on a Redis Cluster)
-- ARGV[3]  task key
-- ARGV[4]  due time, integer milliseconds since the epoch
-- ARGV[5]  record without its due time, with its "k<len>:<delay key>" field
-- ARGV[6]  queue name (member of KEYS[5])
-- ARGV[7]  wake-up pubsub channel
-- ARGV[8]  delay key
-- ARGV[9]  when the key is held: 'replace', 'keep' or 'reject'
-- ARGV[10] max wait (ms): a replace never pushes the due time later than this after the
--          first pending message of the key was scheduled; 0: no limit
-- Returns  {outcome, message key, due time}:
--          0 stored, key free: the new message's key and due time
--          1 stored, replacing the pending message: the replaced message's key, new due
--          2 dropped (keep): the pending message's key and due time
--          3 refused (reject): the pending message's key and due time

local now = server_now()
local delay_key, on_held, max_wait = ARGV[8], ARGV[9], tonumber(ARGV[10])
local due, since, outcome, replaced = tonumber(ARGV[4]), now, 0, nil

local pending, held_since = key_holder(delay_key)
local record = pending and redis.call('HGET', MSG, pending)
if record then
  if on_held ~= 'replace' then
    redis.call('HINCRBY', STATS, on_held == 'keep' and 'dropped' or 'refused', 1)
    local pending_due = parse(record)
    return {on_held == 'keep' and 2 or 3, pending, tonumber(pending_due) or 0}
  end
  remove_message(pending, record)
  forget_duplicate(pending)
  redis.call('HINCRBY', STATS, 'replaced', 1)
  since, outcome, replaced = held_since, 1, pending
end
if max_wait > 0 then due = math.min(due, since + max_wait) end

local key = store_message(ARGV[3], string.format('%d', due), ARGV[5])
redis.call('HSET', DUP, index_field(delay_key), since .. ':' .. key)
if KEYS[5] then redis.call('SADD', KEYS[5], ARGV[6]) end
redis.call('HINCRBY', STATS, 'scheduled', 1)
if head() == key then redis.call('PUBLISH', ARGV[7], due) end
return {outcome, replaced or key, due}

-- Deliver a bounded batch of due messages to their kombu queue lists, atomically.
--
-- "Due" is judged by the Redis server's clock, so movers on hosts with different
-- clocks agree. Several movers may run this at once without a lock: each call is
-- atomic, so every message is delivered by exactly one of them.
-- Payloads are pushed byte-for-byte as stored; they are never decoded here.
--
-- KEYS[1]  P:{Q}:due     zset  message id -> due time (ms)
-- KEYS[2]  P:{Q}:msg     hash  message id -> record
-- KEYS[3]  P:{Q}:ids     hash  task id -> space-separated message ids
-- KEYS[4]  P:{Q}:stats   hash  counters: moved, and the lateness histogram (now - due)
-- ARGV[1]  most messages to move in this call
-- ARGV[2..] upper bounds (ms) of the lateness histogram buckets, ascending
-- Returns  {moved, next due time in ms or -1 when the queue is empty, server time in ms,
--           due ids whose record was missing or unreadable (dropped from the schedule;
--           an unreadable record stays in KEYS[2] for inspection),
--           greatest lateness (now - due, ms) among the moved messages}

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Remove one message id from a task's space-separated id list.
local function unindex(task_id, message_id)
  local ids = redis.call('HGET', KEYS[3], task_id)
  if not ids then return end
  local rest = {}
  for id in string.gmatch(ids, '%S+') do
    if id ~= message_id then rest[#rest + 1] = id end
  end
  if #rest == 0 then
    redis.call('HDEL', KEYS[3], task_id)
  else
    redis.call('HSET', KEYS[3], task_id, table.concat(rest, ' '))
  end
end

-- Read one "<len>:<bytes>" field of a record starting at pos; return it and the next
-- pos, or nil for a record this store did not write (it is then left for `doctor`).
local function field(record, pos)
  local colon = string.find(record, ':', pos, true)
  local len = colon and tonumber(string.sub(record, pos, colon - 1))
  if not len or colon + len > #record then return nil end
  return string.sub(record, colon + 1, colon + len), colon + len + 1
end

-- Count one delivery's lateness into the first bucket that holds it (non-cumulative;
-- readers add them up). Counted in a table and written once per call.
local late_counts, late_sum, late_max = {}, 0, 0
local function observe_lateness(late)
  late_sum = late_sum + late
  if late > late_max then late_max = late end
  local bucket = 'late_le_inf'
  for i = 2, #ARGV do
    if late <= tonumber(ARGV[i]) then bucket = 'late_le_' .. ARGV[i]; break end
  end
  late_counts[bucket] = (late_counts[bucket] or 0) + 1
end

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]),
                       'WITHSCORES')
local moved, missing = 0, 0
for i = 1, #due, 2 do
  local message_id = due[i]
  local record = redis.call('HGET', KEYS[2], message_id)
  local destination, pos, task_id, payload_start
  if record then destination, pos = field(record, 1) end
  if destination then task_id, payload_start = field(record, pos) end
  if task_id then
    redis.call('LPUSH', destination, string.sub(record, payload_start))
    redis.call('HDEL', KEYS[2], message_id)
    if task_id ~= '' then unindex(task_id, message_id) end
    observe_lateness(now - tonumber(due[i + 1]))
    moved = moved + 1
  else
    missing = missing + 1
  end
  redis.call('ZREM', KEYS[1], message_id)
end

if moved > 0 then
  redis.call('HINCRBY', KEYS[4], 'moved', moved)
  redis.call('HINCRBY', KEYS[4], 'late_count', moved)
  redis.call('HINCRBY', KEYS[4], 'late_sum_ms', late_sum)
  for bucket, count in pairs(late_counts) do redis.call('HINCRBY', KEYS[4], bucket, count) end
end

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_due = -1
if head[2] then next_due = tonumber(head[2]) end
return {moved, next_due, now, missing, late_max}

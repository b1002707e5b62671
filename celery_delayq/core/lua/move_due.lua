-- Deliver a bounded batch of due messages to their kombu queue lists, atomically
-- (after prelude.lua).
--
-- "Due" is judged by the Redis server's clock, so movers on hosts with different clocks
-- agree. Several movers may run this at once without a lock: each call is atomic, so
-- every message is delivered by exactly one of them. Payloads are pushed byte-for-byte
-- as stored; they are never decoded here.
--
-- ARGV[3]  most messages to move in this call
-- ARGV[4]  payload bytes after which this call stops (keeps calls short for big messages)
-- ARGV[5]  the queue's own list (destination of records that name none)
-- ARGV[6]  n, how many kombu lists the queue has (its own and its priority sub-lists)
-- ARGV[7..6+n] those lists: when a moved record carries the queue's x-expires, their
--          expiry is refreshed after the push, as kombu's own publish refreshes it
-- ARGV[7+n..] upper bounds (ms) of the lateness histogram buckets, ascending
-- Returns  {moved, next due time in ms or -1 when the queue is empty, server time in ms,
--           due entries whose record was missing or unreadable (dropped from the schedule;
--           an unreadable record stays in KEYS[1] for `doctor`),
--           greatest lateness (now - due, ms) among the moved messages}
-- Errors   when a due message's destination holds something other than a list; then
--          nothing at all was written, and the queue's messages wait for the key to be fixed

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local remaining, budget, own_list = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local last_list = 6 + tonumber(ARGV[6])

-- Lateness histogram, counted here and written once per call (non-cumulative buckets).
local bounds, buckets = {}, {}
for i = last_list + 1, #ARGV do
  bounds[#bounds + 1] = tonumber(ARGV[i])
  buckets[#buckets + 1] = 'late_le_' .. ARGV[i]
end
local late_counts, late_sum, late_max = {}, 0, 0
local function observe_lateness(late)
  late_sum = late_sum + late
  if late > late_max then late_max = late end
  local bucket = 'late_le_inf'
  for i = 1, #bounds do
    if late <= bounds[i] then bucket = buckets[i]; break end
  end
  late_counts[bucket] = (late_counts[bucket] or 0) + 1
end

-- Commands with many arguments, in chunks well below Lua's unpack limit.
local function call_chunked(command, key, values)
  for i = 1, #values, 1000 do
    redis.call(command, key, unpack(values, i, math.min(i + 999, #values)))
  end
end

-- Read first, write last: a destination that is not a list is refused before anything
-- changes (Redis does not undo a script's earlier writes when a later command fails).
local payloads, destinations, delivered, taken_from = {}, {}, {}, {}
local moved, missing, bytes, page_index, expires = 0, 0, 0, 0, nil
while remaining > 0 and bytes < budget do
  local page = redis.call('ZRANGE', PAGES, page_index, page_index, 'WITHSCORES')
  if not page[1] or tonumber(page[2]) > now then break end
  local page_key = PAGE_PREFIX .. page[1]
  local entries = redis.call('ZRANGEBYSCORE', page_key, '-inf', now, 'WITHSCORES',
                             'LIMIT', 0, remaining)
  local keys = {}
  for i = 1, #entries, 2 do keys[#keys + 1] = entries[i] end
  local taken = 0
  if #keys > 0 then
    local records = redis.call('HMGET', MSG, unpack(keys))
    for i, key in ipairs(keys) do
      taken = i
      local record, due, destination, start, x_expires = records[i], nil, nil, nil, nil
      if record then due, destination, start, x_expires = parse(record) end
      if due then
        expires = x_expires or expires
        local payload = string.sub(record, start)
        destination = destination or own_list
        if not payloads[destination] then
          local kind = redis.call('TYPE', destination)['ok']
          if kind ~= 'list' and kind ~= 'none' then
            return redis.error_reply('celery-delayq: cannot deliver to ' .. destination ..
                                     ': it holds a ' .. kind .. ', not a list')
          end
          payloads[destination] = {}
          destinations[#destinations + 1] = destination
        end
        table.insert(payloads[destination], payload)
        delivered[#delivered + 1] = key
        observe_lateness(now - tonumber(entries[2 * i]))
        moved = moved + 1
        bytes = bytes + #payload
        if bytes >= budget then break end
      else
        missing = missing + 1
      end
    end
    remaining = remaining - taken
  end
  taken_from[#taken_from + 1] = {page[1], page_key, taken}
  if taken < redis.call('ZCARD', page_key) then break end  -- the rest is not due (or no room)
  page_index = page_index + 1
end

-- One LPUSH per destination, in due order, as kombu's own put would have pushed them.
for _, destination in ipairs(destinations) do
  call_chunked('LPUSH', destination, payloads[destination])
end
if expires then
  for i = 7, last_list do redis.call('PEXPIRE', ARGV[i], expires) end
end
call_chunked('HDEL', MSG, delivered)
for _, key in ipairs(delivered) do forget_duplicate(key) end
for _, taken in ipairs(taken_from) do
  local number, page_key, count = taken[1], taken[2], taken[3]
  if count > 0 then redis.call('ZREMRANGEBYRANK', page_key, 0, count - 1) end
  if redis.call('EXISTS', page_key) == 0 then redis.call('ZREM', PAGES, number) end
end

if moved > 0 then
  redis.call('HINCRBY', STATS, 'moved', moved)
  redis.call('HINCRBY', STATS, 'late_count', moved)
  redis.call('HINCRBY', STATS, 'late_sum_ms', late_sum)
  for bucket, count in pairs(late_counts) do redis.call('HINCRBY', STATS, bucket, count) end
end

local _, next_due = head()
return {moved, next_due and tonumber(next_due) or -1, now, missing, late_max}

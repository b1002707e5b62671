-- ARGV[3] batch size  ARGV[4] default destination list  ARGV[5..] lateness bucket bounds
-- Returns {moved, next due ms or -1, now ms, missing, max lateness}
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local late_counts, late_sum, late_max = {}, 0, 0
local function observe(late)
  late_sum = late_sum + late
  if late > late_max then late_max = late end
  local bucket = 'late_le_inf'
  for i = 5, #ARGV do
    if late <= tonumber(ARGV[i]) then bucket = 'late_le_' .. ARGV[i]; break end
  end
  late_counts[bucket] = (late_counts[bucket] or 0) + 1
end
local remaining, moved, missing = tonumber(ARGV[3]), 0, 0
while remaining > 0 do
  local fp = redis.call('ZRANGE', PAGES, 0, 0, 'WITHSCORES')
  if not fp[1] or tonumber(fp[2]) > now then break end
  local key = PFX .. fp[1]
  local items = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, remaining)
  local count = #items / 2
  for i = 1, #items, 2 do
    local k = items[i]
    local rec = redis.call('HGET', MSG, k)
    local due, dest, start
    if rec then due, dest, start = parse(rec) end
    if due then
      redis.call('LPUSH', dest or ARGV[4], string.sub(rec, start))
      redis.call('HDEL', MSG, k)
      undup(k)
      observe(now - tonumber(items[i + 1]))
      moved = moved + 1
    else
      missing = missing + 1
    end
  end
  if count > 0 then redis.call('ZREMRANGEBYRANK', key, 0, count - 1) end
  remaining = remaining - count
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', PAGES, fp[1])
  elseif remaining > 0 then
    break  -- this page's rest is not due yet
  end
end
if moved > 0 then
  redis.call('HINCRBY', STATS, 'moved', moved)
  redis.call('HINCRBY', STATS, 'late_count', moved)
  redis.call('HINCRBY', STATS, 'late_sum_ms', late_sum)
  for bucket, c in pairs(late_counts) do redis.call('HINCRBY', STATS, bucket, c) end
end
local _, next_due = head()
return {moved, next_due and tonumber(next_due) or -1, now, missing, late_max}

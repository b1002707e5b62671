-- Returns {pending, overdue, next due ms or -1, now ms}
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local overdue = 0
for _, n in ipairs(redis.call('ZRANGEBYSCORE', PAGES, '-inf', now)) do
  overdue = overdue + redis.call('ZCOUNT', PFX .. n, '-inf', now)
end
local _, next_due = head()
return {redis.call('HLEN', MSG), overdue, next_due and tonumber(next_due) or -1, now}

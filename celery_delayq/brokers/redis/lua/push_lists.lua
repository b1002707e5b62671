-- Push a batch of due messages onto kombu queue lists, in a Redis broker that is not the
-- store's own (run on the broker; no prelude). Every destination is checked before
-- anything is written, so the messages of a good destination are pushed and those of a
-- key that holds something other than a list are refused; nothing is half-done.
--
-- KEYS[1..n] distinct destination lists
-- ARGV[1..n] how many payloads go to each destination, in KEYS order
-- ARGV[n+1..] the payloads, grouped by destination in that order, each group in due order
-- ARGV after them: n expiry times (ms, 0: none), refreshed after the push as kombu's own
--            publish refreshes a queue's x-expires
-- Returns    the indexes (1-based) of the destinations refused, with each one's type:
--            {index, type, index, type, ...}; empty when every message was pushed

local n = #KEYS
local refused, first = {}, n + 1
for i = 1, n do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'list' and kind ~= 'none' then
    refused[#refused + 1] = i
    refused[#refused + 1] = kind
  end
end
local is_refused = {}
for i = 1, #refused, 2 do is_refused[refused[i]] = true end

local total = 0
for i = 1, n do total = total + tonumber(ARGV[i]) end
local expiries = n + total
for i = 1, n do
  local count = tonumber(ARGV[i])
  if not is_refused[i] then
    for j = first, first + count - 1, 1000 do
      redis.call('LPUSH', KEYS[i], unpack(ARGV, j, math.min(j + 999, first + count - 1)))
    end
    local expires = tonumber(ARGV[expiries + i])
    if expires > 0 then redis.call('PEXPIRE', KEYS[i], expires) end
  end
  first = first + count
end
return refused

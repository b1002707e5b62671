--! include prelude.lua
--! include helpers.lua
-- Write a periodic entry's next occurrences ahead, as delayed messages, if the entry's
-- mark is still the one the caller read (after prelude.lua and helpers.lua): the
-- compare-and-set that lets any number of beats write each occurrence once. The same call
-- can first withdraw the occurrences written ahead before (an upsert, pause or removal),
-- so a change takes effect from the next occurrence, atomically.
--
-- KEYS[5]  P:{Q}:periodic        hash  entry name -> mark (the caller's text: its version
--                                      and the last occurrence written ahead)
-- KEYS[6]  P:{Q}:periodic:ahead  hash  entry name -> the message keys written ahead, each
--                                      "<len>:<bytes>" (some may have been moved since)
-- ARGV[3]  entry name
-- ARGV[4]  the mark the caller read ('': none)
-- ARGV[5]  the new mark ('': forget the entry: no mark, nothing ahead)
-- ARGV[6]  withdraw first the occurrences written ahead that are pending and due after
--          this time (ms; 0: all of them); '': withdraw none
-- KEYS[7]  P:queues  set  the queue registry (left out on a Redis Cluster: core/store/writes.py)
-- ARGV[7]  wake-up pubsub channel
-- ARGV[8]  queue name (member of KEYS[7])
-- ARGV[9]  n, then n triples (message key, due time, record) as schedule.lua's
--          ARGV[3], [4], [5]
-- Returns  {1, stored, withdrawn} when the mark was the one read and is now the new one;
--          {0, the mark found} when it was not (another beat wrote ahead, or the entry
--          changed): nothing was written

local MARKS, AHEAD = KEYS[5], KEYS[6]
local name, read_mark, new_mark = ARGV[3], ARGV[4], ARGV[5]
local found_mark = redis.call('HGET', MARKS, name) or ''
if found_mark ~= read_mark then return {0, found_mark} end

local ahead, withdrawn, withdraw_after = {}, 0, tonumber(ARGV[6])
local listed, pos = redis.call('HGET', AHEAD, name) or '', 1
while pos <= #listed do
  local key, after = counted(listed, pos)
  if not key then break end  -- not written by this script: what came before stands
  pos = after
  local record = redis.call('HGET', MSG, key)
  local due = record and tonumber((parse(record)))
  if due and withdraw_after and due > withdraw_after then
    remove_message(key, record)
    forget_duplicate(key)
    withdrawn = withdrawn + 1
  elseif record then
    ahead[#ahead + 1] = #key .. ':' .. key
  end
end
if withdrawn > 0 then redis.call('HINCRBY', STATS, 'cancelled', withdrawn) end

local n, earliest_due = tonumber(ARGV[9]), nil
for i = 10, 9 + 3 * n, 3 do
  local key, earliest = store_message(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  ahead[#ahead + 1] = #key .. ':' .. key
  if earliest then earliest_due = ARGV[i + 1] end
end
if n > 0 then redis.call('HINCRBY', STATS, 'scheduled', n) end
if earliest_due then
  if KEYS[7] then redis.call('SADD', KEYS[7], ARGV[8]) end
  redis.call('PUBLISH', ARGV[7], earliest_due)
end

if new_mark == '' then
  redis.call('HDEL', MARKS, name)
else
  redis.call('HSET', MARKS, name, new_mark)
end
if #ahead == 0 or new_mark == '' then
  redis.call('HDEL', AHEAD, name)
else
  redis.call('HSET', AHEAD, name, table.concat(ahead))
end
return {1, n, withdrawn}

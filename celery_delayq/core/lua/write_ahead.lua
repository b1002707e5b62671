--! include prelude.lua
--! include helpers.lua
-- Write a periodic entry's next occurrences ahead, as delayed messages, if the entry's
-- mark is still the one the caller read and is of no newer version (after prelude.lua and
-- helpers.lua): the compare-and-set that lets any number of beats write each occurrence
-- once, and never go back to an older version. The same call can first withdraw the
-- occurrences written ahead before (an upsert, pause or removal), so a change takes effect
-- from the next occurrence, atomically.
--
-- A mark is "<version> <last ms>|paused|removed[ <since ms>]" (periodic/records.py): the
-- version of the entry written (INCR'd by the registry, so a newer one is larger), the
-- last occurrence written ahead, or the entry paused, or removed (a tombstone: it keeps
-- a beat that still holds the removed entry from writing it anew, and is forgotten after
-- ARGV[7] ms). A mark of any other form counts as version 0.
--
-- KEYS[5]  P:{Q}:periodic        hash  entry name -> mark
-- KEYS[6]  P:{Q}:periodic:ahead  hash  entry name -> the message keys written ahead, each
--                                      "<len>:<bytes>" (some may have been moved since)
-- KEYS[7]  P:{Q}:periodic:gone   zset  entry name -> when its tombstone was written (ms)
-- ARGV[3]  entry name
-- ARGV[4]  the mark the caller read ('': none)
-- ARGV[5]  the new mark ('': forget the entry, whatever its version: no mark, nothing ahead)
-- ARGV[6]  withdraw first the occurrences written ahead that are pending and due after
--          this time (ms; 0: all of them); '': withdraw none
-- KEYS[8]  P:queues  set  the queue registry (left out on a Redis Cluster: core/store/writes.py)
-- ARGV[7]  how long a tombstone is kept (ms); older ones are forgotten by this call
-- ARGV[8]  wake-up pubsub channel
-- ARGV[9]  queue name (member of KEYS[8])
-- ARGV[10] n, then n triples (message key, due time, record) as schedule.lua's
--          ARGV[3], [4], [5]
-- Returns  {1, stored, withdrawn} when the mark was the one read and is now the new one;
--          {0, the mark found, stale} when it was not: nothing was written, and stale is 1
--          when the mark found is of a newer version than the new mark (the caller's entry
--          is an old one: another process changed it), 0 when another beat wrote ahead

local MARKS, AHEAD, GONE = KEYS[5], KEYS[6], KEYS[7]
local name, read_mark, new_mark = ARGV[3], ARGV[4], ARGV[5]

-- The version of a mark (its digits, without leading zeros) and its state ('removed',
-- 'paused' or 'written'); '0' and nil for a mark of no known form. A mark is at most
-- MARK_LONGEST bytes (18 digits, a state of 15, a time of 15): a longer one (crafted) is
-- not matched at all, as the pattern's backtracking takes time quadratic in its length.
local MARK_LONGEST = 50
local function version_of(mark)
  if #mark > MARK_LONGEST then return '0', nil end
  local version, state, since = string.match(mark, '^(%d+) (%w+) ?(%d*)$')
  if not version or #version > 18 or #since > 15 or string.find(mark, ' $') then
    return '0', nil
  end
  if string.match(state, '^%d+$') and #state <= 15 then
    state = 'written'
  elseif state ~= 'paused' and state ~= 'removed' then
    return '0', nil
  end
  return string.match(version, '^0*(%d+)$'), state
end

-- Whether version a (digits, no leading zeros) is below version b.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end

local found_mark = redis.call('HGET', MARKS, name) or ''
local found_version, found_state = version_of(found_mark)
local new_version, new_state = version_of(new_mark)
if new_mark ~= '' and below(new_version, found_version) then return {0, found_mark, 1} end
if found_mark ~= read_mark then return {0, found_mark, 0} end

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

local n, earliest_due = tonumber(ARGV[10]), nil
for i = 11, 10 + 3 * n, 3 do
  local key, earliest = store_message(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  ahead[#ahead + 1] = #key .. ':' .. key
  if earliest then earliest_due = ARGV[i + 1] end
end
if n > 0 then redis.call('HINCRBY', STATS, 'scheduled', n) end
if earliest_due then
  if KEYS[8] then redis.call('SADD', KEYS[8], ARGV[9]) end
  redis.call('PUBLISH', ARGV[8], earliest_due)
end

-- Tombstones past their time are forgotten, a few per call (each removal adds one).
local now = server_now()
local expired = redis.call('ZRANGEBYSCORE', GONE, '-inf', now - tonumber(ARGV[7]), 'LIMIT', 0, 20)
for _, gone in ipairs(expired) do
  local _, state = version_of(redis.call('HGET', MARKS, gone) or '')
  if state == 'removed' then redis.call('HDEL', MARKS, gone) end
  redis.call('ZREM', GONE, gone)
end

if new_mark == '' then
  redis.call('HDEL', MARKS, name)
else
  redis.call('HSET', MARKS, name, new_mark)
end
if new_state == 'removed' then
  redis.call('ZADD', GONE, now, name)
elseif found_state == 'removed' then
  redis.call('ZREM', GONE, name)
end
if #ahead == 0 or new_mark == '' or new_state == 'removed' then
  redis.call('HDEL', AHEAD, name)
else
  redis.call('HSET', AHEAD, name, table.concat(ahead))
end
return {1, n, withdrawn}

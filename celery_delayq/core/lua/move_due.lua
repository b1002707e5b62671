--! include prelude.lua
--! include helpers.lua
-- Deliver a bounded batch of due messages to their kombu queue lists, atomically
-- (after prelude.lua).
--
-- "Due" is judged by the Redis server's clock, so movers on hosts with different clocks
-- agree. Several movers may run this at once without a lock: each call is atomic, so
-- every message is delivered by exactly one of them. Payloads are pushed byte-for-byte
-- as stored (an inline record whole, its due-time key included; layout/record.py); they are
-- never decoded here.
--
-- KEYS[5]  P:{Q}:dead      hash  message key -> record: an unreadable record goes there
-- KEYS[6]  P:{Q}:dead:why  hash  message key -> "<ms when> 0 unreadable record: <reason>"
-- ARGV[3]  most messages to move in this call
-- ARGV[4]  payload bytes after which this call stops (keeps calls short for big messages)
-- ARGV[5]  the queue's own list (destination of records that name none)
-- ARGV[6]  ahead (ms): messages due up to this long from now are moved too (a worker
--          holds a message until the ETA in its header; moving ahead lets its fetch
--          happen before that ETA rather than after it)
-- ARGV[7]  burst lead (ms): most a dense instant is moved ahead beyond ARGV[6] (0: off)
-- ARGV[8]  fetch time per message (us): the earliest instant, n messages due within
--          ARGV[9] ms of the earliest one, is moved n times this ahead when that is more
--          than ARGV[6] (at most ARGV[6] + ARGV[7]): workers fetch it while they wait, as
--          vanilla's hold it, and their timers still start each at its ETA
-- ARGV[9]  instant (ms): how close to the earliest due time a message counts in it
-- ARGV[10] n, how many kombu lists the queue has (its own and its priority sub-lists)
-- ARGV[11..10+n] those lists: when a moved record carries the queue's x-expires, their
--          expiry is refreshed after the push, as kombu's own publish refreshes it
-- ARGV[11+n..] upper bounds (ms) of the lateness histogram buckets, ascending
-- Returns  {moved, next due time in ms or -1 when the queue is empty, server time plus
--           the look-ahead in ms (the time messages were judged due by),
--           due entries whose record was missing or unreadable (dropped from the schedule;
--           an unreadable record goes to the dead letters, KEYS[5] and KEYS[6]),
--           greatest lateness (now - due, ms) among the moved messages,
--           how much further ahead (ms) than this call the next instant is to be moved}
-- Errors   when a due message's destination holds something other than a list; then
--          nothing at all was written, and the queue's messages wait for the key to be fixed

local now = server_now()
local limit, budget, own_list = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local ahead, most_lead = tonumber(ARGV[6]), tonumber(ARGV[7])
local fetch_us, instant = tonumber(ARGV[8]), tonumber(ARGV[9])
local last_list = 10 + tonumber(ARGV[10])
local lateness = lateness_histogram(last_list + 1)
-- Pages counted at most for the look-ahead: an instant's messages share few pages (one
-- due time is never split), so this bounds the count's cost, not its reach.
local MOST_PAGES = 32

-- How far ahead of now the earliest instant is moved: ahead, or more when it holds more
-- messages than the workers can fetch in that time (counted only as far as it matters).
local function look_ahead()
  if most_lead <= 0 or ahead <= 0 then return ahead end
  local _, earliest = head()
  if not earliest then return ahead end
  local last = tonumber(earliest) + instant
  local enough = math.ceil((ahead + most_lead) * 1000 / fetch_us)
  local n = 0
  local pages = redis.call('ZRANGEBYSCORE', PAGES, '-inf', last, 'LIMIT', 0, MOST_PAGES)
  for _, page in ipairs(pages) do
    n = n + redis.call('ZCOUNT', PAGE_PREFIX .. page, '-inf', last)
    if n >= enough then break end
  end
  return math.max(ahead, math.min(ahead + most_lead, math.floor(n * fetch_us / 1000)))
end

local lead = look_ahead()
local judged = now + lead

-- Read first, write last: a destination that is not a list is refused before anything
-- changes (Redis does not undo a script's earlier writes when a later command fails).
local found, taken_from, missing = collect_due(judged, limit, budget)
local payloads, destinations, expires = {}, {}, nil
for i = 1, found.n do
  local destination = found.destination[i] or own_list
  expires = found.expires[i] or expires
  local list = payloads[destination]
  if not list then
    local kind = redis.call('TYPE', destination)['ok']
    if kind ~= 'list' and kind ~= 'none' then
      return redis.error_reply('celery-delayq: cannot deliver to ' .. destination ..
                               ': it holds a ' .. kind .. ', not a list')
    end
    list = {}
    payloads[destination] = list
    destinations[#destinations + 1] = destination
  end
  local record, start = found.record[i], found.start[i]
  list[#list + 1] = start == 1 and record or string.sub(record, start)  -- inline: whole
  local late = now - found.due[i]
  lateness.observe(late > 0 and late or 0)
end

-- One LPUSH per destination, in due order, as kombu's own put would have pushed them.
for _, destination in ipairs(destinations) do
  call_chunked('LPUSH', destination, payloads[destination])
end
if expires then
  for i = 11, last_list do redis.call('PEXPIRE', ARGV[i], expires) end
end
call_chunked('HDEL', MSG, found.key)
bury_unreadable(found, KEYS[5], KEYS[6], now)
for i = 1, found.n do
  local key = found.key[i]
  if #key ~= 16 then forget_duplicate(key) end  -- a packed task id is no duplicate's key
  if found.delay_key[i] then release_key(found.delay_key[i], key) end
end
drop_taken(taken_from)
lateness.write()

local _, next_due = head()
local further = next_due and math.max(0, look_ahead() - lead) or 0
return {found.n, next_due and tonumber(next_due) or -1, judged, missing, lateness.max, further}

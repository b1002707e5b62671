--! include prelude.lua
--! include helpers.lua
--! include gates.lua
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
-- KEYS[7]  P:{Q}:fc:ready   zset  flow control's ready buckets (gates.lua): a due message
--                                with a gate waits in its bucket, and the buckets whose
--                                limits allow release their next messages in this call;
--                                while P:{Q}:fc:paused exists (formed from it) the call
--                                moves nothing
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
-- ARGV[10] how many releases the flow-control log keeps (0: none; gates.lua)
-- ARGV[11] n, how many kombu lists the queue has (its own and its priority sub-lists)
-- ARGV[12..11+n] those lists: when a moved record carries the queue's x-expires, their
--          expiry is refreshed after the push, as kombu's own publish refreshes it
-- ARGV[12+n..] upper bounds (ms) of the lateness histogram buckets, ascending
-- Returns  {moved (delivered, put in a bucket or released from one), next due time (or
--           next release) in ms or -1 when the queue is empty or paused, server time plus
--           the look-ahead in ms (the time messages were judged due by),
--           due entries whose record was missing or unreadable (dropped from the schedule;
--           an unreadable record goes to the dead letters, KEYS[5] and KEYS[6]),
--           greatest lateness (now - due, ms) among the moved messages,
--           how much further ahead (ms) than this call the next instant is to be moved,
--           how much of the batch the call used (a release counts as RELEASE_WEIGHT
--           messages, and as many releases as the batch allows as all of it:
--           release_share in gates.lua), how long (us) the call kept Redis busy
--           (worked_us in helpers.lua; 0: not measured); the last two left out when
--           the queue is paused}
-- Errors   when a due message's destination holds something other than a list; then
--          nothing at all was written, and the queue's messages wait for the key to be fixed

local started = work_clock_us()
local now = server_now()
local limit, budget, own_list = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local ahead, most_lead = tonumber(ARGV[6]), tonumber(ARGV[7])
local fetch_us, instant = tonumber(ARGV[8]), tonumber(ARGV[9])
local log_size = tonumber(ARGV[10])
local last_list = 11 + tonumber(ARGV[11])
local lateness = lateness_histogram(last_list + 1)
-- Pages counted at most for the look-ahead: an instant's messages share few pages (one
-- due time is never split), so this bounds the count's cost, not its reach.
local MOST_PAGES = 32

-- A paused queue (ops/pause.py's pause_queue) releases nothing, due or gated: its
-- messages wait, and its movers wait for the wake-up its resume publishes.
if redis.call('EXISTS', GATES .. 'paused') == 1 then return {0, -1, now + ahead, 0, 0, 0} end

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
local kinds = {}  -- destination -> whether it can take a push (a list, or no key yet)
local function deliverable(destination)
  if kinds[destination] == nil then
    local kind = redis.call('TYPE', destination)['ok']
    kinds[destination] = kind == 'list' or kind == 'none'
  end
  return kinds[destination]
end
-- Queue message i of `batch` (found-style) for its list, which deliverable() allowed.
local function push(batch, i)
  local destination = batch.destination[i] or own_list
  expires = batch.expires[i] or expires
  local list = payloads[destination]
  if not list then
    list = {}
    payloads[destination] = list
    destinations[#destinations + 1] = destination
  end
  local record, start = batch.record[i], batch.start[i]
  list[#list + 1] = start == 1 and record or string.sub(record, start)  -- inline: whole
end
for i = 1, found.n do
  local destination = found.destination[i] or own_list
  local _, bucket = gate_parts(found.gate[i])
  if bucket and not gate_usable(bucket) then  -- crafted keys: delivered unlimited
    found.gate[i], bucket = nil, nil
  end
  if not bucket and not deliverable(destination) then
    return redis.error_reply('celery-delayq: cannot deliver to ' .. destination ..
                             ': it holds a ' .. redis.call('TYPE', destination)['ok'] ..
                             ', not a list')
  end
end

-- Writes from here on. A message with a gate waits in its bucket (one the record names
-- unreadably is delivered as it would be without); then the buckets release. Without
-- flow control in use (no gated message due, no bucket waiting to release) this costs
-- one read: tasks without limits pay no more.
local now_us = nil  -- the time in us, read once flow control has work
local release = next_release_ms()  -- the first bucket's release (ms), before this call's
local done = {}  -- message keys leaving MSG
local kept = {}  -- messages back to the schedule: waiting list and destination crafted
for i = 1, found.n do
  local spec, bucket = gate_parts(found.gate[i])
  if spec then now_us = now_us or server_us() end
  local waits = spec and enter_gate(found.key[i], spec, bucket, now_us, now)
  if not waits and spec and not deliverable(found.destination[i] or own_list) then
    kept[#kept + 1] = i  -- its bucket's waiting list crafted, and its destination too
    found.delay_key[i] = nil  -- it keeps its delay key
  elseif not waits then  -- unlimited, or its bucket's waiting list crafted: unlimited
    push(found, i)
    done[#done + 1] = found.key[i]
    local late = now - found.due[i]
    lateness.observe(late > 0 and late or 0)
  end
end
local released = {n = 0, key = {}, record = {}, due = {}, destination = {}, start = {},
                  expires = {}, bad_key = {}, bad_record = {}, bad_reason = {}}
local looked_at = 0  -- messages the release looked at (release_share)
if now_us or release then
  now_us = now_us or server_us()
  looked_at = release_gates(now_us, now, judged, most_releases(limit), budget, log_size,
                            released, function(destination)
    return deliverable(destination or own_list)
  end)
  release = next_release_ms()
end
for i = 1, released.n do
  push(released, i)
  done[#done + 1] = released.key[i]
end

-- One LPUSH per destination, in due order, as kombu's own put would have pushed them.
for _, destination in ipairs(destinations) do
  call_chunked('LPUSH', destination, payloads[destination])
end
if expires then
  for i = 12, last_list do redis.call('PEXPIRE', ARGV[i], expires) end
end
call_chunked('HDEL', MSG, done)
bury_unreadable(found, KEYS[5], KEYS[6], now)
bury_unreadable(released, KEYS[5], KEYS[6], now)
for _, key in ipairs(done) do
  if #key ~= 16 then forget_duplicate(key) end  -- a packed task id is no duplicate's key
end
for i = 1, found.n do
  if found.delay_key[i] then release_key(found.delay_key[i], found.key[i]) end
end
drop_taken(taken_from)
for _, i in ipairs(kept) do  -- due again, and taken again once its keys are fixed
  add_entry(found.key[i], found.due[i])
end
lateness.write()

local _, next_due = head()
local further = next_due and math.max(0, look_ahead() - lead) or 0
next_due = next_due and tonumber(next_due)
-- a bucket's next release, on the clock messages are judged by (now plus the lead): the
-- mover then wakes at the release itself, not the lead before it, when nothing may go
if release then release = release + lead end
if release and (not next_due or release < next_due) then next_due, further = release, 0 end
return {found.n + released.n + #released.bad_key, next_due or -1, judged, missing,
        lateness.max, further,
        found.n + missing + release_share(looked_at, limit), worked_us(started)}

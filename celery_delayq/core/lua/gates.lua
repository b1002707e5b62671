-- Flow control (after prelude.lua and helpers.lua): a due message whose record names a
-- gate (layout/gates.py) waits in its bucket until every limit of the bucket allows its
-- release; the scripts that take due messages (move_due.lua) put it there and release
-- from every bucket in the same call.
--
-- KEYS[7]  P:{Q}:fc:ready  zset  bucket -> when (us) its first waiting message may go; a
--                                bucket is a member exactly while messages wait in it
-- and, formed here under the same hash tag, per bucket b:
--          P:{Q}:fc:w:<b>  list  message keys waiting, in due order (their records stay
--                                in MSG until released)
--          P:{Q}:fc:s:<b>  hash  spec (its limits, as the last message to enter said),
--                                t<i> (the theoretical arrival time of rate i, us), hold
--                                (no release before this, us; "paused": none until
--                                resumed), released (count); expires a day after it
--                                stops mattering
--          P:{Q}:fc:r:<b>  zset  message key -> end (ms) of the lease on its running slot
--          P:{Q}:fc:log    list  "<us> <bucket>" per release, newest first, kept to the
--                                length the caller asks (0: no log)
--
-- A gate is "<spec> <bucket>"; spec is comma-separated "r<interval us>/<catch-up us>"
-- per rate and "c<most>/<lease ms>" for a concurrency limit. Rates are GCRA without a
-- burst (layout/gates.py proves the bound): a release's logical time is its rate's
-- arrival time, or up to the catch-up before now when that is later, and the arrival
-- time moves on by the interval. Any other token is ignored: a crafted spec cannot make
-- a call run long, only release its messages unlimited.

local READY = KEYS[7]
local GATES = string.sub(READY, 1, -6)  -- "P:{Q}:fc:"
local DAY_US = 86400 * 1000000

-- The Redis server's time in us (rates of more than 1000/s need finer than ms).
local function server_us()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- Most rates a bucket keeps (a spec's further rates are ignored), and the state fields
-- one HMGET reads: spec, hold, released and every rate's arrival time.
local MOST_RATES = 8
local STATE_FIELDS = {'spec', 'hold', 'released'}
for i = 1, MOST_RATES do STATE_FIELDS[3 + i] = 't' .. i end

-- One bucket's keys, limits and state (one read).
local function open_bucket(bucket)
  local b = {name = bucket, state = GATES .. 's:' .. bucket, waiting = GATES .. 'w:' .. bucket,
             running = GATES .. 'r:' .. bucket, rates = {}, tats = {}}
  local state = redis.call('HMGET', b.state, unpack(STATE_FIELDS))
  for token in string.gmatch(state[1] or '', '[^,]+') do
    local kind, a, c = string.match(token, '^([rc])(%d+)/(%d+)$')
    if kind == 'r' and #b.rates < MOST_RATES then
      b.rates[#b.rates + 1] = {tonumber(a), tonumber(c)}
    elseif kind == 'c' then
      b.most, b.lease = tonumber(a), tonumber(c)
    end
  end
  b.hold = state[2] == 'paused' and math.huge or tonumber(state[2]) or 0
  local released = tonumber(state[3]) or 0
  -- a crafted count (not a number, negative, huge) starts again from 0
  b.released = (released >= 0 and released < 2 ^ 53) and released or 0
  for i = 1, #b.rates do b.tats[i] = tonumber(state[3 + i]) or 0 end
  return b
end

-- When (us) the bucket's next message may go: its hold, every rate's arrival time less
-- its catch-up's reach (see above), and, with every slot taken, the first lease's end.
local function allowed_at(b, now, now_ms)
  local at = b.hold
  for i, rate in ipairs(b.rates) do
    local ready = b.tats[i]
    if ready > at then at = ready end
  end
  if b.most then
    redis.call('ZREMRANGEBYSCORE', b.running, '-inf', now_ms)  -- a dead worker's slots
    if redis.call('ZCARD', b.running) >= b.most then
      local first = redis.call('ZRANGE', b.running, 0, 0, 'WITHSCORES')[2]
      local free = first and tonumber(first) * 1000 or now
      if free > at then at = free end
    end
  end
  return at
end

-- Keep the bucket's state: its arrival times, and an expiry a day after the last of
-- them (a paused bucket's never expires).
local function save_bucket(b, now, released)
  local fields, last = {}, now
  for i = 1, #b.rates do
    fields[#fields + 1] = 't' .. i
    fields[#fields + 1] = string.format('%d', b.tats[i])
    if b.tats[i] > last then last = b.tats[i] end
  end
  if released > 0 then
    fields[#fields + 1] = 'released'
    fields[#fields + 1] = string.format('%d', b.released + released)
  end
  if #fields > 0 then redis.call('HSET', b.state, unpack(fields)) end
  if b.hold == math.huge then
    redis.call('PERSIST', b.state)
  else
    if b.hold > last then last = b.hold end
    redis.call('PEXPIRE', b.state, math.floor((last - now + DAY_US) / 1000))
  end
end

-- A record's gate as spec and bucket; nil for one this store did not write (its
-- message is then delivered as it would be without).
local function gate_parts(gate)
  local space = gate and string.find(gate, ' ', 1, true)
  if not space or space == #gate then return nil end
  return string.sub(gate, 1, space - 1), string.sub(gate, space + 1)
end

-- The buckets entered in this call (bucket -> the spec written), and how many messages.
local entered, gated = {}, 0

-- Put a due message in its bucket (spec and bucket: gate_parts of its gate).
local function enter_gate(key, spec, bucket, now, now_ms)
  if entered[bucket] ~= spec then  -- the spec is checked once per bucket and call
    local state = GATES .. 's:' .. bucket
    if redis.call('HGET', state, 'spec') ~= spec then redis.call('HSET', state, 'spec', spec) end
    entered[bucket] = spec
  end
  if redis.call('RPUSH', GATES .. 'w:' .. bucket, key) == 1 then
    local b = open_bucket(bucket)
    redis.call('ZADD', READY, allowed_at(b, now, now_ms), bucket)
    save_bucket(b, now, 0)
  end
  gated = gated + 1
end

-- Release from the ready buckets, the longest-waiting first (fair across buckets: a
-- bucket's backlog takes its turn, then goes to the back), at most `most` messages
-- looked at. Appends the released to `out` (found-style arrays, as collect_due: n, key,
-- record, due, destination, start, expires), and unreadable records to its bad_* arrays.
-- `judged_ms`: a message due later than this was rescheduled after it entered (it waits
-- in the schedule again): its stale place in the bucket is dropped. `deliverable(d)`:
-- whether destination d (nil: the queue's own) can take it now; while not, the message
-- keeps its place and its bucket is looked at again a second later. Called once per call,
-- after every enter_gate: it also counts the messages entered.
local function release_gates(now, now_ms, judged_ms, most, log_size, out, deliverable)
  local work, logged, later, emptied = 0, {}, {}, {}
  local buckets = redis.call('ZRANGEBYSCORE', READY, '-inf', now, 'LIMIT', 0, most)
  for _, bucket in ipairs(buckets) do
    if work >= most then break end
    local b = open_bucket(bucket)
    local released, at = 0, allowed_at(b, now, now_ms)
    while at <= now and work < most do
      local key = redis.call('LPOP', b.waiting)
      if not key then break end
      work = work + 1
      local record = redis.call('HGET', MSG, key)
      local due, destination, start, expires, _, gate
      if record then due, destination, start, expires, _, gate = parse(record) end
      if record and not start then
        local bad = #out.bad_key + 1
        out.bad_key[bad], out.bad_record[bad], out.bad_reason[bad] = key, record, destination
      elseif start and gate and string.sub(gate, -#bucket - 1) == ' ' .. bucket
          and tonumber(due) <= judged_ms and not deliverable(destination) then
        redis.call('LPUSH', b.waiting, key)
        at = now + 1000000
      elseif start and gate and string.sub(gate, -#bucket - 1) == ' ' .. bucket
          and tonumber(due) <= judged_ms then
        local n = out.n + 1
        out.n, out.key[n], out.record[n], out.due[n] = n, key, record, tonumber(due)
        out.destination[n], out.start[n], out.expires[n] = destination, start, expires
        for i, rate in ipairs(b.rates) do
          b.tats[i] = math.max(b.tats[i], now - rate[2]) + rate[1]
        end
        if b.most then redis.call('ZADD', b.running, now_ms + b.lease, key) end
        if log_size > 0 then logged[#logged + 1] = string.format('%d ', now) .. bucket end
        released = released + 1
        at = allowed_at(b, now, now_ms)
      end  -- else cancelled, or due again later: nothing to release
    end
    if redis.call('LLEN', b.waiting) == 0 then
      emptied[#emptied + 1] = bucket
    else  -- its next turn; written for all buckets at once below (score, member pairs)
      later[#later + 1] = at
      later[#later + 1] = bucket
    end
    save_bucket(b, now, released)
  end
  call_chunked('ZADD', READY, later)  -- chunks of 1,000 values: whole pairs
  call_chunked('ZREM', READY, emptied)
  if #logged > 0 then  -- pushed oldest first: the newest ends at the head
    call_chunked('LPUSH', GATES .. 'log', logged)
    redis.call('LTRIM', GATES .. 'log', 0, log_size - 1)
  end
  if gated > 0 then redis.call('HINCRBY', STATS, 'gated', gated) end
  if out.n > 0 then redis.call('HINCRBY', STATS, 'released', out.n) end
end

-- When (ms) the first ready bucket may release, or nil.
local function next_release_ms()
  local first = redis.call('ZRANGE', READY, 0, 0, 'WITHSCORES')[2]
  if not first or tonumber(first) == math.huge then return nil end
  return math.ceil(tonumber(first) / 1000)
end

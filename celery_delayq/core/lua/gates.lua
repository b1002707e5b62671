-- Flow control (after prelude.lua and helpers.lua): a due message whose record names a
-- gate (layout/gates.py) waits in its bucket until every limit of the bucket allows its
-- release; the scripts that take due messages (move_due.lua, and claim_due.lua for a
-- broker elsewhere) put it there and release from every bucket in the same call, and the
-- publish scripts (schedule_gated.lua, schedule_many_gated.lua) put one due at its
-- publish there (publish_gated, at the end).
--
-- KEYS[n]  P:{Q}:fc:ready  zset  bucket -> when (us) its first waiting message may go; a
--                                bucket is a member exactly while messages wait in it.
--                                It is the including script's last key: KEYS[7] of
--                                move_due.lua, KEYS[11] of claim_due.lua (handover.lua)
-- and, formed here under the same hash tag, per bucket b:
--          P:{Q}:fc:w:<b>  list  message keys waiting, in due order (their records stay
--                                in MSG until released)
--          P:{Q}:fc:s:<b>  hash  spec (its limits, as the last message to enter said),
--                                t<i> (the theoretical arrival time of the spec's rate i,
--                                us; a changed spec carries each rate's over), hold
--                                (no release before this, us; "paused": none until
--                                resumed), released (count), indexed (the bucket's
--                                time in the index, ms); expires a day after it stops
--                                mattering, or up to INDEX_SLACK later: with its index
--                                member (save_bucket)
--          P:{Q}:fc:r:<b>  zset  message key -> end (ms) of the lease on its running slot
--          P:{Q}:fc:log    list  "<us> <bucket>" per release, newest first, kept to the
--                                length the caller asks (0: no log)
--          P:{Q}:fc:index  zset  bucket -> when (ms) it stops mattering (+inf: paused):
--                                its state's expiry, or a running slot's lease end if
--                                later (slot_take.lua), plus up to INDEX_SLACK; written
--                                again only when the state would outlast it (its
--                                indexed), so the reader (store/flow.py) finds buckets
--                                with nothing waiting here, not in the keyspace. A call
--                                that writes it drops at most INDEX_PRUNE members whose
--                                time is past
--          P:{Q}:fc:released hash  task -> its messages released, ever (a count that
--                                never goes back, for Prometheus: a state's count
--                                goes when the state expires); one write a call
--
-- A gate is "<spec> <bucket>"; spec is comma-separated "r<interval us>/<catch-up us>"
-- per rate and "c<most>/<lease ms>" for a concurrency limit. Rates are GCRA without a
-- burst (layout/gates.py proves the bound): a release's logical time is its rate's
-- arrival time, or up to the catch-up before now when that is later, and the arrival
-- time moves on by the interval. Any other token is ignored, and so is a rate or lease
-- longer than MOST_US (layout/gates.py refuses them): a crafted spec cannot make a call
-- run long, only release its messages unlimited.
--
-- Crafted keys and values: a bucket's keys holding another type, or numbers Redis would
-- refuse (nan, inf, beyond 2^53), cost that bucket its limits, never the call: a call
-- that failed after its first write would hold every message of the queue, and could
-- leave a message it had taken from its bucket with nothing to move it. A key's type is
-- not asked beforehand (two TYPE commands per bucket were most of the cost of entering
-- one): the first command on it is run with redis.pcall, and its wrong-type error
-- reply, which writes nothing, is what marks the key crafted for the rest of the call.
--
-- A limit holds across every mover and shard because one bucket lives in one place:
-- with delayq_store_shards > 1 each gated message is stored in its bucket's shard
-- (layout/gates.py shard_key: by the bucket alone, not the task id), so all of a
-- bucket's messages, its state and its log share one hash tag, one Redis Cluster slot,
-- and every release of the bucket is one atomic call there. Buckets (tasks, limit keys)
-- spread over the shards; a bucket never spans two. (Changing delayq_store_shards while
-- messages wait may put a bucket's newer messages in another shard, with a state of its
-- own there: until the old shard's bucket drains, up to twice the limit.)

local READY = KEYS[#KEYS]
local GATES = string.sub(READY, 1, -6)  -- "P:{Q}:fc:"
local DAY_US = 86400 * 1000000
-- Longest interval or lease (us) a spec may ask for: 366 days, as layout/gates.py's.
local MOST_US = 366 * DAY_US
-- Times (us) beyond this are crafted: read as 0, so that all arithmetic on them stays
-- exact and every command takes them as integers.
local MOST_TIME = 2 ^ 52

-- A time (us) read from a bucket's state; 0 for anything that is not one.
local function time_us(text)
  local t = tonumber(text)
  if t and t == t and t > -MOST_TIME and t < MOST_TIME then return t end
  return 0
end

-- Whether a redis.pcall reply is an error (a crafted key's wrong type).
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- The Redis server's time in us (rates of more than 1000/s need finer than ms).
local function server_us()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- Most rates a bucket keeps (a spec's further rates are ignored), and the state fields
-- one HMGET reads: spec, hold, released, every rate's arrival time, and indexed.
local MOST_RATES = 8
local STATE_FIELDS = {'spec', 'hold', 'released'}
for i = 1, MOST_RATES do STATE_FIELDS[3 + i] = 't' .. i end
STATE_FIELDS[4 + MOST_RATES] = 'indexed'

-- Each bucket's state as that HMGET read it (false for an absent field), read once a call
-- and kept as this file's writes leave it; false for a state key of another type.
local states = {}
local function bucket_state(bucket)
  local state = states[bucket]
  if state == nil then
    state = redis.pcall('HMGET', GATES .. 's:' .. bucket, unpack(STATE_FIELDS))
    if failed(state) then state = false end
    states[bucket] = state
  end
  return state
end

-- Buckets whose waiting list was found to hold another type in this call.
local crafted_waiting = {}

-- Whether a due message can wait in this bucket as far as this call knows (else it is
-- delivered unlimited): its waiting list is known when enter_gate pushes to it.
local function gate_usable(bucket)
  return bucket_state(bucket) ~= false and not crafted_waiting[bucket]
end

-- A spec's rates ({interval us, catch-up us} each) and its concurrency (most, lease ms).
local function read_spec(spec)
  local rates, most, lease = {}, nil, nil
  for token in string.gmatch(spec or '', '[^,]+') do
    local kind, a, c = string.match(token, '^([rc])(%d+)/(%d+)$')
    a, c = tonumber(a), tonumber(c)
    if kind == 'r' and #rates < MOST_RATES and a <= MOST_US and c <= MOST_US then
      rates[#rates + 1] = {a, c}
    elseif kind == 'c' and c <= MOST_US / 1000 then
      most, lease = a, c
    end
  end
  return rates, most, lease
end

-- One bucket's keys, limits and state (one read).
local function open_bucket(bucket)
  local b = {name = bucket, state = GATES .. 's:' .. bucket, waiting = GATES .. 'w:' .. bucket,
             running = GATES .. 'r:' .. bucket, rates = {}, tats = {}, hold = 0, released = 0}
  local state = bucket_state(bucket)
  if not state then
    b.unlimited = true  -- crafted: its messages go as they would without limits
    return b
  end
  b.rates, b.most, b.lease = read_spec(state[1])
  b.hold = state[2] == 'paused' and math.huge or time_us(state[2])
  local released = tonumber(state[3]) or 0
  -- a crafted count (not a number, negative, huge) starts again from 0
  b.released = (released >= 0 and released < MOST_TIME) and released or 0
  for i = 1, #b.rates do b.tats[i] = time_us(state[3 + i]) end
  b.indexed = tonumber(state[4 + MOST_RATES])
  return b
end

-- When (us) the bucket's next message may go: its hold, every rate's arrival time (the
-- catch-up applies to the release's logical time, see above), and, with every slot
-- taken, the first lease's end.
local function allowed_at(b, now, now_ms)
  local at = b.hold
  for i = 1, #b.rates do
    if b.tats[i] > at then at = b.tats[i] end
  end
  -- a dead worker's slots go; running slots of another type (crafted): no limit
  if b.most and failed(redis.pcall('ZREMRANGEBYSCORE', b.running, '-inf', now_ms)) then
    b.most = nil
  end
  if b.most then
    if redis.call('ZCARD', b.running) >= b.most then
      local first = redis.call('ZRANGE', b.running, 0, 0, 'WITHSCORES')[2]
      local free = first and time_us(tonumber(first) * 1000) or now
      if free > at then at = free end
    end
  end
  return at
end

-- The bucket index and the released counts (see above); either holding another type
-- (crafted) is left alone, looked at once a call.
local BUCKET_INDEX, RELEASED_COUNTS = GATES .. 'index', GATES .. 'released'
local INDEX_PRUNE = 100
-- How much longer (ms) than its state a bucket is indexed: its state is saved at every
-- release, and its index member is written again only once the state outlasts it.
local INDEX_SLACK = 3600 * 1000
local index_usable, released_by_task, tasks_released = nil, {}, {}

-- Index bucket b until its state's end `until_ms` (+inf: never), unless its index
-- member already lasts that long and not much longer; the state's fields to write get
-- the time written. The first write of a call also drops at most INDEX_PRUNE members
-- whose time is past `now_ms`: a new member comes with a write, so it keeps up, and no
-- call loops over the index. Returns when (ms, +inf: never) the state is to expire when
-- that must be set now: the time written, or `until_ms` with an index of another type;
-- nil when the state's expiry, set with its member, still holds.
local function index_bucket(b, until_ms, now_ms, fields)
  local indexed = b.indexed
  if indexed and indexed >= until_ms and indexed <= until_ms + INDEX_SLACK then return nil end
  if index_usable == nil then  -- of another type: the read's error reply says so
    local past = redis.pcall('ZRANGEBYSCORE', BUCKET_INDEX, '-inf',
                             string.format('(%d', now_ms), 'LIMIT', 0, INDEX_PRUNE)
    index_usable = not failed(past)
    if index_usable and #past > 0 then redis.call('ZREM', BUCKET_INDEX, unpack(past)) end
  end
  if not index_usable then return until_ms end  -- crafted: nothing written, nothing said written
  local ends = until_ms == math.huge and until_ms or until_ms + INDEX_SLACK
  local score = ends == math.huge and '+inf' or string.format('%d', ends)
  redis.call('ZADD', BUCKET_INDEX, score, b.name)
  fields[#fields + 1] = 'indexed'
  fields[#fields + 1] = score
  states[b.name][4 + MOST_RATES] = score  -- as bucket_state keeps it
  return ends
end

-- Count `count` releases of a bucket against its task (written by write_released).
local function tally_released(bucket, count)
  local cut = string.find(bucket, '\0', 1, true)
  local task = cut and string.sub(bucket, 1, cut - 1) or bucket
  if not released_by_task[task] then
    released_by_task[task] = 0
    tasks_released[#tasks_released + 1] = task
  end
  released_by_task[task] = released_by_task[task] + count
end

-- Add this call's releases to each task's count: one read and one write per 500 tasks.
-- A crafted count (not a whole number, negative, huge) starts again from 0.
local function write_released()
  for first = 1, #tasks_released, 500 do
    local last = math.min(first + 499, #tasks_released)
    -- of another type (crafted): the read's error reply says so, and nothing is written
    local old = redis.pcall('HMGET', RELEASED_COUNTS, unpack(tasks_released, first, last))
    if failed(old) then break end
    local fields = {}
    for i = first, last do
      local task, count = tasks_released[i], tonumber(old[i - first + 1]) or 0
      if not (count >= 0 and count < MOST_TIME) or count % 1 ~= 0 then count = 0 end
      fields[#fields + 1] = task
      fields[#fields + 1] = string.format('%d', count + released_by_task[task])
    end
    redis.call('HSET', RELEASED_COUNTS, unpack(fields))
  end
  released_by_task, tasks_released = {}, {}
end

-- Keep the bucket's state: its arrival times, and an expiry a day after the last of
-- them (a paused bucket's never expires); index it until then. The expiry is set with
-- the index member, to the member's time (up to INDEX_SLACK later): one command less
-- for each save in between, as a release's is.
local function save_bucket(b, now, released)
  if released > 0 then tally_released(b.name, released) end
  if b.unlimited then return end
  local fields, last, kept = {}, now, states[b.name]
  for i = 1, #b.rates do
    fields[#fields + 1] = 't' .. i
    fields[#fields + 1] = string.format('%d', b.tats[i])
    kept[3 + i] = fields[#fields]
    if b.tats[i] > last then last = b.tats[i] end
  end
  if released > 0 then
    b.released = b.released + released
    fields[#fields + 1] = 'released'
    fields[#fields + 1] = string.format('%d', b.released)
    kept[3] = fields[#fields]
  end
  local now_ms, until_ms = math.floor(now / 1000), math.huge
  if b.hold ~= math.huge then
    if b.hold > last then last = b.hold end
    -- a slot taken now runs until its lease's end, which may be later
    until_ms = math.max(math.floor((last + DAY_US) / 1000), now_ms + (b.most and b.lease or 0))
  end
  local ends = index_bucket(b, until_ms, now_ms, fields)
  if #fields > 0 then redis.call('HSET', b.state, unpack(fields)) end
  if ends == math.huge then
    redis.call('PERSIST', b.state)
  elseif ends then
    redis.call('PEXPIREAT', b.state, string.format('%d', ends))
  end
end

-- A record's gate as spec and bucket; nil for one this store did not write (its
-- message is then delivered as it would be without).
local function gate_parts(gate)
  local space = gate and string.find(gate, ' ', 1, true)
  if not space or space == #gate then return nil end
  return string.sub(gate, 1, space - 1), string.sub(gate, space + 1)
end

-- Write a bucket's spec, as the message entering it says. A changed spec keeps each
-- rate's arrival time by the rate's interval, wherever the rate now stands in it; a new
-- rate starts an interval after the latest arrival time of the old ones, so no release
-- comes sooner after the last than the new rate allows.
-- The bucket's state (bucket_state) is kept as written.
local function write_spec(bucket, spec)
  local state, old = GATES .. 's:' .. bucket, bucket_state(bucket)
  if old[1] == spec then return end
  local fields = {'spec', spec}
  if old[1] then
    local kept, latest = {}, 0
    for i, rate in ipairs(read_spec(old[1])) do
      local tat = time_us(old[3 + i])
      kept[rate[1]] = tat
      if tat > latest then latest = tat end
    end
    local rates = read_spec(spec)
    for i, rate in ipairs(rates) do
      fields[#fields + 1] = 't' .. i
      fields[#fields + 1] = string.format('%d', kept[rate[1]] or
                                          (latest > 0 and latest + rate[1] or 0))
      old[3 + i] = fields[#fields]
    end
    local gone = {}
    for i = #rates + 1, MOST_RATES do
      gone[#gone + 1] = 't' .. i
      old[3 + i] = false
    end
    redis.call('HDEL', state, unpack(gone))
  end
  old[1] = spec
  redis.call('HSET', state, unpack(fields))
end

-- The buckets entered in this call (bucket -> the spec written), and how many messages.
local entered, gated = {}, 0

-- Put a due message in its bucket (spec and bucket: gate_parts of its gate; the bucket
-- gate_usable). Returns false when its waiting list turns out to hold another type
-- (crafted: the message is not in the bucket, and the caller lets it go unlimited or
-- keeps it), else true, or when the bucket has just become ready with it, when (us) it
-- may release. The count of messages entered is written by count_gated, which every
-- caller calls after the last (release_gates does).
local function enter_gate(key, spec, bucket, now, now_ms)
  local length = redis.pcall('RPUSH', GATES .. 'w:' .. bucket, key)
  if failed(length) then
    crafted_waiting[bucket] = true
    return false
  end
  if entered[bucket] ~= spec then  -- the spec is looked at once per bucket and call
    write_spec(bucket, spec)
    entered[bucket] = spec
  end
  gated = gated + 1
  if length > 1 then return true end
  local b = open_bucket(bucket)
  local at = allowed_at(b, now, now_ms)
  redis.call('ZADD', READY, at, bucket)
  save_bucket(b, now, 0)
  return at
end

-- Add the messages entered in this call to the queue's count of them.
local function count_gated()
  if gated > 0 then redis.call('HINCRBY', STATS, 'gated', gated) end
  gated = 0
end

-- Release from the ready buckets, the longest-waiting first (fair across buckets: a
-- bucket's backlog takes its turn, then goes to the back), at most `most` messages
-- looked at, and no more once `budget` payload bytes are released (as collect_due: big
-- messages keep a call short). Appends the released to `out` (found-style arrays, as
-- collect_due: n, key, record, due, destination, start, expires), and unreadable records
-- to its bad_* arrays. Returns how many messages it looked at (released, unreadable, or
-- cancelled since they entered).
-- `judged_ms`: a message due later than this was rescheduled after it entered (it waits
-- in the schedule again): its stale place in the bucket is dropped. `deliverable(d)`:
-- whether destination d (nil: the queue's own) can take it now; while not, the message
-- keeps its place and its bucket is looked at again a second later. (claim_due.lua's
-- always says yes: its broker answers for each message, and a refused one comes back
-- through release_claimed.lua.)
local function release_gates(now, now_ms, judged_ms, most, budget, log_size, out,
                             deliverable)
  local work, bytes, logged, later, emptied = 0, 0, {}, {}, {}
  local buckets = redis.call('ZRANGEBYSCORE', READY, '-inf', now, 'LIMIT', 0, most)
  for _, bucket in ipairs(buckets) do
    if work >= most or bytes >= budget then break end
    local b = open_bucket(bucket)
    local released, at = 0, allowed_at(b, now, now_ms)
    if crafted_waiting[bucket] then at = math.huge end  -- none wait there
    while at <= now and work < most and bytes < budget do
      local key = redis.pcall('LPOP', b.waiting)
      if failed(key) then crafted_waiting[bucket] = true end
      if not key or crafted_waiting[bucket] then break end
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
        bytes = bytes + #record - start + 1
        for i, rate in ipairs(b.rates) do
          b.tats[i] = math.max(b.tats[i], now - rate[2]) + rate[1]
        end
        if b.most then redis.call('ZADD', b.running, now_ms + b.lease, key) end
        if log_size > 0 then logged[#logged + 1] = string.format('%d ', now) .. bucket end
        released = released + 1
        at = allowed_at(b, now, now_ms)
      end  -- else cancelled, or due again later: nothing to release
    end
    local left = not crafted_waiting[bucket] and redis.pcall('LLEN', b.waiting)
    if not left or failed(left) or left == 0 then  -- crafted (none wait there), or empty
      emptied[#emptied + 1] = bucket
    else  -- its next turn; written for all buckets at once below (score, member pairs)
      later[#later + 1] = string.format('%.17g', at)
      later[#later + 1] = bucket
    end
    save_bucket(b, now, released)
  end
  call_chunked('ZADD', READY, later)  -- chunks of 1,000 values: whole pairs
  call_chunked('ZREM', READY, emptied)
  -- pushed oldest first: the newest ends at the head; a log of another type: none
  if #logged > 0 and not failed(redis.pcall('LPUSH', GATES .. 'log', logged[1])) then
    local rest = {}
    for i = 2, #logged do rest[i - 1] = logged[i] end
    call_chunked('LPUSH', GATES .. 'log', rest)
    redis.call('LTRIM', GATES .. 'log', 0, log_size - 1)
  end
  write_released()
  count_gated()
  if out.n > 0 then redis.call('HINCRBY', STATS, 'released', out.n) end
  return work
end

-- How many due messages one release costs against a call's batch: a release reads and
-- writes its bucket (about 6 commands against a move's few per message), so a call's
-- batch of `limit` allows limit / RELEASE_WEIGHT releases and keeps its time budget
-- (benchmarks/RESULTS-flow-keys.md).
local RELEASE_WEIGHT = 3

-- The most releases a call whose batch is `limit` makes.
local function most_releases(limit)
  return math.max(1, math.floor(limit / RELEASE_WEIGHT))
end

-- How much of a call's batch of `limit` its release part used, having looked at `work`
-- messages: the client sizes the next batch by the time per message of this one
-- (core/batching.py), which a release's weight would otherwise count three times over. A
-- call that looked at as many as it may (most_releases) used its whole batch: a third of
-- a batch that is no multiple of three rounds down, and such a call (10, the least, makes
-- 3 releases) would otherwise never count as a full batch that lets the batch grow again.
local function release_share(work, limit)
  if work >= most_releases(limit) then return limit end
  return work * RELEASE_WEIGHT
end

-- When (ms) the first ready bucket may release, or nil.
local function next_release_ms()
  local first = redis.call('ZRANGE', READY, 0, 0, 'WITHSCORES')[2]
  if not first or tonumber(first) == math.huge then return nil end
  return math.ceil(tonumber(first) / 1000)
end

-- Keep one published message with a gate (schedule_gated.lua for one,
-- schedule_shard_gated.lua for each of a chunk's): one due by this server's clock
-- (now_us) goes straight into its bucket, as a move would put it there, so no mover
-- spends its calls entering it; one due later, or whose bucket's keys are crafted, is
-- kept in the schedule as store_message keeps any message, and a move enters it once due.
-- `no_eta`: sent without an ETA, so due now whatever the sender's clock wrote (one
-- running ahead wrote a later due time, taken back to now in the record too). The
-- caller calls count_gated after the last.
-- Returns what the movers are to be woken for, as announce takes it: whether (the
-- message became its queue's earliest, or its bucket became ready with it) and for when
-- (ms; nil: no wake-up, its bucket paused).
local function publish_gated(key, due, record, no_eta, now_us)
  local now = math.floor(now_us / 1000)  -- ms, as server_now reads it
  local record_due, _, _, _, _, gate = parse(record)
  local spec, bucket = gate_parts(gate)
  if no_eta and record_due and tonumber(due) > now then
    due = string.format('%d', now)
    record = with_due(record, record_due, due)
  end
  -- due by the server's clock, which the releases judge by too: a release drops a message
  -- due after the time it judges by as rescheduled (release_gates)
  if not spec or tonumber(due) > now or not gate_usable(bucket) then
    local _, earliest = store_message(key, due, record)
    return earliest, due
  end
  key = keep_record(key, record)
  local ready_at = enter_gate(key, spec, bucket, now_us, now)
  if not ready_at then return add_entry(key, due), due end  -- its waiting list crafted
  -- a bucket that waits from now on: the movers woken for its release, which may be
  -- sooner than they know (none while the bucket is paused)
  if ready_at == true then return false, nil end
  if ready_at == math.huge then return true, nil end
  return true, string.format('%d', math.ceil(ready_at / 1000))
end

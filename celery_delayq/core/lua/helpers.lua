-- The rest of the shared code of the per-queue store scripts: reading records, removing
-- messages, duplicates, delay keys, and collecting due messages. Every store script but
-- schedule.lua and schedule_many.lua includes it after prelude.lua.

-- Records are read by one grammar, here and in layout/record.py alike
-- (tests/core/store/test_store_adversarial.py compares the two): every number is 1 to
-- MAX_DIGITS ASCII digits (no sign, exponent, hex or space; at most 15 digits, so Lua's
-- doubles hold it exactly), a counted field's bytes lie within the record, and a
-- destination is never empty.
local MAX_DIGITS = 15

-- The digits at pos and the index after them; nil when there are none or too many.
local function digits_at(record, pos)
  local text = string.match(record, '^%d+', pos)
  if not text or #text > MAX_DIGITS then return nil end
  return text, pos + #text
end

-- A "<len>:<bytes>" field of a record at pos: the bytes and the index after them.
local function counted(record, pos)
  local len, colon = digits_at(record, pos)
  if not len or string.byte(record, colon) ~= 58 then return nil end  -- 58: ':'
  local last = colon + tonumber(len)
  if last > #record then return nil end
  return string.sub(record, colon + 1, last), last + 1
end

-- How an inline record starts, before its due time (layout/record.py's INLINE_PREFIX), and the
-- pattern capturing that due time.
local INLINE = '{"delayq":'
local INLINE_DUE = '^' .. INLINE .. '(%d+),'  -- none of INLINE's characters is magic

-- The optional fields of a prefixed record after its due time, at pos: the index of the
-- payload's first byte, then destination, x-expires, delay key and gate; nil and a
-- reason when unreadable.
local function prefixed_fields(record, pos)
  local destination, expires, delay_key, gate
  if string.sub(record, pos, pos) == 'd' then
    destination, pos = counted(record, pos + 1)
    if not destination or destination == '' then return nil, 'bad destination' end
  end
  if string.sub(record, pos, pos) == 'x' then
    expires, pos = digits_at(record, pos + 1)
    if not expires then return nil, 'bad x-expires' end
  end
  if string.sub(record, pos, pos) == 'k' then
    delay_key, pos = counted(record, pos + 1)
    if not delay_key then return nil, 'bad delay key' end
  end
  if string.sub(record, pos, pos) == 'l' then
    gate, pos = counted(record, pos + 1)
    if not gate then return nil, 'bad gate' end
  end
  if string.sub(record, pos, pos) ~= ':' then return nil, 'no payload separator' end
  return pos + 1, destination, expires, delay_key, gate
end

-- A record's due time, destination (nil: the queue's own list), the index of the first
-- byte to deliver (1: an inline record is delivered whole), the queue's x-expires in ms
-- (nil: none), its delay key (nil: none) and its gate (nil: not flow-controlled,
-- gates.lua); nil and the reason for a record this store did not write. Records
-- (layout/record.py): inline '{"delayq":<due>,<rest of the envelope>', or prefixed
-- "<due>[d<len>:<destination>][x<ms>][k<len>:<delay key>][l<len>:<gate>]:<payload>".
local function parse(record)
  local inline_due = string.match(record, INLINE_DUE)
  if inline_due then
    if #inline_due > MAX_DIGITS then return nil, 'bad due time' end
    return inline_due, nil, 1, nil, nil
  end
  local due, pos = digits_at(record, 1)
  if not due then return nil, 'bad due time' end
  if string.byte(record, pos) == 58 then return due, nil, pos + 1, nil, nil end  -- no fields
  local start, destination, expires, delay_key, gate = prefixed_fields(record, pos)
  if not start then return nil, destination end  -- destination: the reason
  return due, destination, start, expires, delay_key, gate
end

-- The record with its due time (`old_due`, as parse read it) changed to `due`.
local function with_due(record, old_due, due)
  if string.byte(record) == 123 then  -- '{': inline
    return INLINE .. due .. string.sub(record, #INLINE + #old_due + 1)
  end
  return due .. string.sub(record, #old_due + 1)
end

-- Keep the first page's start at its earliest due time once entries have left it (see
-- prelude.lua: page_for tells a new earliest message by the starts alone).
local function settle_first_page()
  local first = redis.call('ZRANGE', PAGES, 0, 0, 'WITHSCORES')
  if not first[1] then return end
  local entry = redis.call('ZRANGE', PAGE_PREFIX .. first[1], 0, 0, 'WITHSCORES')
  if entry[2] and tonumber(entry[2]) > tonumber(first[2]) then
    redis.call('ZADD', PAGES, entry[2], first[1])
  end
end

-- Remove a message key from the page holding its due time; 1 when it was there.
local function remove_entry(key, due)
  local offset, due_number = 0, tonumber(due)
  while true do
    local found = redis.call('ZREVRANGEBYSCORE', PAGES, due, '-inf', 'WITHSCORES', 'LIMIT',
                             offset, 1)
    if not found[1] then return 0 end
    local page_key = PAGE_PREFIX .. found[1]
    if redis.call('ZREM', page_key, key) == 1 then
      if redis.call('EXISTS', page_key) == 0 then redis.call('ZREM', PAGES, found[1]) end
      settle_first_page()
      return 1
    end
    if tonumber(found[2]) < due_number then return 0 end
    offset = offset + 1
  end
end

-- The earliest pending message: its key and due time, or nil.
local function head()
  local first = redis.call('ZRANGE', PAGES, 0, 0)
  if not first[1] then return nil end
  local entry = redis.call('ZRANGE', PAGE_PREFIX .. first[1], 0, 0, 'WITHSCORES')
  return entry[1], entry[2]
end

-- The task key and sequence number of a duplicate's message key, else nil.
local function duplicate_of(key)
  if #key == 16 then return nil end
  local seq, colon = string.match(key, '^\2?\255(%d+)():')
  if seq then return string.sub(key, colon + 1), seq end
end

-- Forget a delivered or removed duplicate in its task's index of extra messages (BY_TASK;
-- a store written before that index listed it in DUP: forget_listed).
local function forget_duplicate(key)
  local task_key, seq = duplicate_of(key)
  if not task_key then return end
  if redis.call('ZREM', BY_TASK, extra_prefix(task_key) .. seq) == 1 then return end
  local seqs = redis.call('HGET', DUP, task_key)
  if not seqs then return end
  local rest = {}
  for s in string.gmatch(seqs, '%S+') do
    if s ~= seq then rest[#rest + 1] = s end
  end
  if #rest == 0 then
    redis.call('HDEL', DUP, task_key)
  else
    redis.call('HSET', DUP, task_key, table.concat(rest, ' '))
  end
end

-- Up to `most` extra messages of one task, in BY_TASK order after the member `after`
-- ('': from the first): their message keys, and the BY_TASK members that index them (one
-- range read, O(log n + most)).
local function extra_messages(task_key, most, after)
  local prefix = extra_prefix(task_key)
  -- a member is the prefix and a sequence number's digits, all below ':'
  local members = redis.call('ZRANGEBYLEX', BY_TASK, '(' .. (after ~= '' and after or prefix),
                             '(' .. prefix .. ':', 'LIMIT', 0, most)
  local keys = {}
  for i, member in ipairs(members) do
    keys[i] = duplicate_key(task_key, string.sub(member, #prefix + 1))
  end
  return keys, members
end

-- The DUP field indexing a delay key (record.key_index_field): never 16 bytes long, so it
-- cannot pass for a packed task id.
local function index_field(delay_key)
  local field = '\4' .. delay_key
  if #field == 16 then return '\2' .. field end
  return field
end

-- The pending message holding a delay key, and since when (ms) the key has been held.
local function key_holder(delay_key)
  local held = redis.call('HGET', DUP, index_field(delay_key))
  if not held then return nil end
  local colon = string.find(held, ':', 1, true)
  return string.sub(held, colon + 1), tonumber(string.sub(held, 1, colon - 1))
end

-- A keyed message leaves the schedule (moved, claimed, cancelled, dead): its key is free,
-- unless another message holds it by now.
local function release_key(delay_key, key)
  if delay_key and key_holder(delay_key) == key then
    redis.call('HDEL', DUP, index_field(delay_key))
  end
end

-- A keyed message is back in the schedule (a hand-over failed): it holds its key again,
-- unless a newer message took it meanwhile.
local function hold_key_again(record, key, now)
  local _, _, _, _, delay_key = parse(record)
  if delay_key then redis.call('HSETNX', DUP, index_field(delay_key), now .. ':' .. key) end
end

-- Remove one pending message (cancelled, or replaced under its delay key): its record,
-- its page entry, and its hold on its delay key.
local function remove_message(key, record)
  local due, _, _, _, delay_key = parse(record)
  if due then remove_entry(key, due) end
  redis.call('HDEL', MSG, key)
  release_key(delay_key, key)
end

-- Due messages, in due order, up to `limit` of them and `budget` payload bytes, read
-- without writing anything; the pages read (for drop_taken); and how many due entries
-- had a missing or unreadable record (their entries are dropped with the others; the
-- caller hands the unreadable records to bury_unreadable). The messages come as parallel
-- arrays, message i at index i of each (one table per field, not one per message: a
-- batch is hundreds): found.n, found.key, .record, .due (ms), .destination (nil: the
-- queue's own list), .start (first byte to deliver, as parse), .expires (x-expires ms or
-- nil), .delay_key, .gate; the unreadable ones in found.bad_key, .bad_record,
-- .bad_reason.
local function collect_due(now, limit, budget)
  local found = {n = 0, key = {}, record = {}, due = {}, destination = {}, start = {},
                 expires = {}, delay_key = {}, gate = {}, bad_key = {}, bad_record = {},
                 bad_reason = {}}
  local taken_from, missing, bytes, page_index = {}, 0, 0, 0
  while limit > 0 and bytes < budget do
    local page = redis.call('ZRANGE', PAGES, page_index, page_index, 'WITHSCORES')
    if not page[1] or tonumber(page[2]) > now then break end
    local page_key = PAGE_PREFIX .. page[1]
    -- no WITHSCORES: a record starts with its due time, and the scores would double the
    -- reply (~8% of a move's Redis time)
    local keys = redis.call('ZRANGEBYSCORE', page_key, '-inf', now, 'LIMIT', 0, limit)
    local taken = 0
    if #keys > 0 then
      local records = redis.call('HMGET', MSG, unpack(keys))
      for i, key in ipairs(keys) do
        taken = i
        local record = records[i]
        local due, destination, start, expires, delay_key, gate
        if record then due, destination, start, expires, delay_key, gate = parse(record) end
        if record and not start then
          local bad = #found.bad_key + 1
          found.bad_key[bad], found.bad_record[bad] = key, record
          found.bad_reason[bad] = destination  -- parse's second value: the reason
          missing = missing + 1
        elseif start then
          local n = found.n + 1
          found.n = n
          found.key[n], found.record[n], found.due[n] = key, record, tonumber(due)
          found.start[n] = start
          -- the optional fields only where set: most records have none
          if destination then found.destination[n] = destination end
          if expires then found.expires[n] = expires end
          if delay_key then found.delay_key[n] = delay_key end
          if gate then found.gate[n] = gate end
          bytes = bytes + #record - start + 1
          if bytes >= budget then break end
        else
          missing = missing + 1
        end
      end
      limit = limit - taken
    end
    taken_from[#taken_from + 1] = {page[1], page_key, taken}
    if taken < redis.call('ZCARD', page_key) then break end  -- the rest is not due (or no room)
    page_index = page_index + 1
  end
  return found, taken_from, missing
end

-- Move an unreadable record out of the schedule into the dead letters (hashes `dead` and
-- `dead_why`, as handover.lua's dead_letter does), with the reason parse gave.
local function bury(key, record, reason, dead, dead_why, now)
  redis.call('HSET', dead, key, record)
  redis.call('HSET', dead_why, key, now .. ' 0 unreadable record: ' .. reason)
  redis.call('HDEL', MSG, key)
  forget_duplicate(key)
  redis.call('HINCRBY', STATS, 'dead', 1)
end

-- Bury the unreadable records collect_due found.
local function bury_unreadable(found, dead, dead_why, now)
  for i = 1, #found.bad_key do
    bury(found.bad_key[i], found.bad_record[i], found.bad_reason[i], dead, dead_why, now)
  end
end

-- Remove from their pages the entries collect_due took (a page left empty goes).
local function drop_taken(taken_from)
  for _, taken in ipairs(taken_from) do
    local number, page_key, count = taken[1], taken[2], taken[3]
    if count > 0 then redis.call('ZREMRANGEBYRANK', page_key, 0, count - 1) end
    if redis.call('EXISTS', page_key) == 0 then redis.call('ZREM', PAGES, number) end
  end
  settle_first_page()
end

-- The lateness (ms after the due time) of delivered messages, counted in a histogram
-- whose bucket bounds are ARGV[first..] (ascending), and written to STATS once per call
-- (non-cumulative buckets), together with the count of delivered messages; after
-- write(), histogram.count and histogram.max hold the count and the greatest lateness.
-- Messages come in due order, so most fall in the bucket of the one before: that bucket
-- is tried first.
local function lateness_histogram(first)
  local bounds, counts = {}, {}
  local count, sum, max = 0, 0, 0
  for i = first, #ARGV do bounds[#bounds + 1] = tonumber(ARGV[i]) end
  local last, low, high = 0, 0, -1  -- the previous message's bucket, (low, high]
  local histogram = {}
  function histogram.observe(late)
    count, sum = count + 1, sum + late
    if late > max then max = late end
    if late > high or late <= low then
      last = #bounds + 1
      for i = 1, #bounds do
        if late <= bounds[i] then last = i; break end
      end
      low, high = bounds[last - 1] or -1, bounds[last] or math.huge
    end
    counts[last] = (counts[last] or 0) + 1
  end
  function histogram.write()
    histogram.count, histogram.max = count, max
    if count == 0 then return end
    redis.call('HINCRBY', STATS, 'moved', count)
    redis.call('HINCRBY', STATS, 'late_count', count)
    redis.call('HINCRBY', STATS, 'late_sum_ms', sum)
    for i, n in pairs(counts) do
      redis.call('HINCRBY', STATS, 'late_le_' .. (ARGV[first + i - 1] or 'inf'), n)
    end
  end
  return histogram
end

-- The Redis server's time in ms: "due" is judged by it, so hosts with different clocks
-- agree.
local function server_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A clock (us) for how long a script keeps Redis busy, which the movers size their
-- batches by (core/batching.py), free of the client's round trip and its waits: Redis's
-- own CPU time (os.clock) where scripts have it (Redis 7.2 on, Valkey), else the server's
-- clock, which runs on within a script there (Redis 6.2 and 7.0). A server that has
-- neither (TIME frozen within a script, no os.clock) measures 0: the movers then go by
-- their own timing.
local os_library = rawget(_G, 'os')
local cpu_clock = os_library and os_library.clock
local function work_clock_us()
  if cpu_clock then return cpu_clock() * 1000000 end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- The time (us) a script has kept Redis busy since `started` (work_clock_us).
local function worked_us(started)
  return math.floor(work_clock_us() - started)
end

-- Commands with many arguments, in chunks well below Lua's unpack limit.
local function call_chunked(command, key, values)
  for i = 1, #values, 1000 do
    redis.call(command, key, unpack(values, i, math.min(i + 999, #values)))
  end
end

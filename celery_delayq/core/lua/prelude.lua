-- Shared start of every per-queue store script (scripts.py puts it in front of each).
--
-- One queue's delayed messages live in a record hash and in small "pages" of due times:
--
-- KEYS[1]  P:{Q}:msg    hash  message key -> record "<due ms>[d<len>:<destination>]
--                             [x<expires ms>][k<len>:<delay key>]:<payload>"
--                             (the destination is left out when it is the queue's own list;
--                             x: the queue's x-expires, when its publisher declared one;
--                             k: a keyed message's delay key)
-- KEYS[2]  P:{Q}:pages  zset  page number -> page start (<= every due time in the page)
-- KEYS[3]  P:{Q}:dup    hash  task key -> sequence numbers of its extra messages (rarely
--                             used), and "\4<delay key>" -> "<since ms>:<message key>" for
--                             each pending keyed message (index_field)
-- KEYS[4]  P:{Q}:stats  hash  counters (scheduled, moved, cancelled, lateness histogram,
--                             page_seq, dup_seq)
-- ARGV[1]  page key prefix "P:{Q}:p:"; page n is the zset P:{Q}:p:<n> of message key -> due
-- ARGV[2]  most entries a page gets before it is split (below zset-max-listpack-entries,
--          so pages stay in Redis's compact listpack encoding)
--
-- Why pages: a sorted-set entry in a big zset costs ~100 bytes of skiplist and hashtable;
-- in a listpack page it costs the key and the due time. Every due time in page n is below
-- the start of page n+1, so the first page holds the earliest messages, and a due time is
-- never split across two pages. Page keys share the queue's {Q} hash tag.
--
-- Message key: the task id packed by record.py (16 bytes for a uuid, and only then), or,
-- for a second message of the same task id, "\255<seq>:<task key>" (prefixed with "\2"
-- if that is 16 bytes long), listed under the task key in KEYS[3].

local MSG, PAGES, DUP, STATS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local PAGE_PREFIX, PAGE_MAX = ARGV[1], tonumber(ARGV[2])

-- A "<len>:<bytes>" field of a record at pos: the bytes and the index after them.
local function counted(record, pos)
  local colon = string.find(record, ':', pos, true)
  local len = colon and tonumber(string.sub(record, pos, colon - 1))
  if not len then return nil end
  return string.sub(record, colon + 1, colon + len), colon + len + 1
end

-- A record's due time, destination (nil: the queue's own list), the index of its
-- payload's first byte, the queue's x-expires in ms (nil: none) and its delay key (nil:
-- none); nil for a record this store did not write.
-- Record: "<due>[d<len>:<destination>][x<ms>][k<len>:<delay key>]:<payload>".
local function parse(record)
  local plain_due, plain_start = string.match(record, '^(%d+):()')
  if plain_due then return plain_due, nil, plain_start, nil, nil end  -- most records: no fields
  local due_end = string.find(record, '[^0-9]')
  if not due_end or due_end == 1 then return nil end
  local due, destination, expires, delay_key = string.sub(record, 1, due_end - 1), nil, nil, nil
  local pos = due_end
  if string.sub(record, pos, pos) == 'd' then
    destination, pos = counted(record, pos + 1)
    if not destination then return nil end
  end
  if string.sub(record, pos, pos) == 'x' then
    local expires_end = string.find(record, '[^0-9]', pos + 1)
    if not expires_end or expires_end == pos + 1 then return nil end
    expires = string.sub(record, pos + 1, expires_end - 1)
    pos = expires_end
  end
  if string.sub(record, pos, pos) == 'k' then
    delay_key, pos = counted(record, pos + 1)
    if not delay_key then return nil end
  end
  if string.sub(record, pos, pos) ~= ':' then return nil end
  return due, destination, pos + 1, expires, delay_key
end

local function new_page(start)
  local n = redis.call('HINCRBY', STATS, 'page_seq', 1)
  redis.call('ZADD', PAGES, start, n)
  return tostring(n)
end

-- The page a due time goes to: the last page starting at or before it; below the first
-- page, the first page (whose start is lowered).
local function page_for(due)
  local found = redis.call('ZREVRANGEBYSCORE', PAGES, due, '-inf', 'LIMIT', 0, 1)
  if found[1] then return found[1] end
  found = redis.call('ZRANGE', PAGES, 0, 0)
  if found[1] then
    redis.call('ZADD', PAGES, due, found[1])
    return found[1]
  end
  return new_page(due)
end

-- Split a full page where the due time changes, nearest its middle, in O(log n) reads:
-- a flood of messages due in the same millisecond must not cost a full read per add. A
-- page of one single due time is left to grow (correct, only less compact).
local function split(page_key, size)
  local middle = redis.call('ZRANGE', page_key, math.floor(size / 2), math.floor(size / 2),
                            'WITHSCORES')[2]
  local below = redis.call('ZCOUNT', page_key, '-inf', '(' .. middle)  -- rank of its first
  local through = redis.call('ZCOUNT', page_key, '-inf', middle)      -- rank after its last
  local cut = below
  if below == 0 or (through < size and through - size / 2 < size / 2 - below) then
    cut = through
  end
  if cut == 0 or cut == size then return end
  local entries = redis.call('ZRANGE', page_key, cut, -1, 'WITHSCORES')
  local upper_key = PAGE_PREFIX .. new_page(entries[2])
  for first = 1, #entries, 1000 do  -- in chunks: Lua's unpack has a limit
    local chunk = {}
    for i = first, math.min(first + 998, #entries), 2 do
      chunk[#chunk + 1] = entries[i + 1]
      chunk[#chunk + 1] = entries[i]
    end
    redis.call('ZADD', upper_key, unpack(chunk))
  end
  redis.call('ZREMRANGEBYRANK', page_key, cut, -1)
end

local function add_entry(key, due)
  local page_key = PAGE_PREFIX .. page_for(due)
  redis.call('ZADD', page_key, due, key)
  local size = redis.call('ZCARD', page_key)
  if size > PAGE_MAX then split(page_key, size) end
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

-- The message key of a task's extra message number seq (record.duplicate_key).
local function duplicate_key(task_key, seq)
  local key = '\255' .. seq .. ':' .. task_key
  if #key == 16 then return '\2' .. key end
  return key
end

-- Keep one message until it is due (schedule.lua; schedule_many.lua, per message): its
-- record and page entry. A second message of the same task id is kept as a duplicate.
-- Returns the message key it is kept under.
local function store_message(key, due, tail)
  local record = due .. tail
  if redis.call('HSETNX', MSG, key, record) == 0 then
    local seq = redis.call('HINCRBY', STATS, 'dup_seq', 1)
    local seqs = redis.call('HGET', DUP, key)
    redis.call('HSET', DUP, key, seqs and (seqs .. ' ' .. seq) or seq)
    key = duplicate_key(key, seq)
    redis.call('HSET', MSG, key, record)
  end
  add_entry(key, due)
  return key
end

-- The task key and sequence number of a duplicate's message key, else nil.
local function duplicate_of(key)
  if #key == 16 then return nil end
  local seq, colon = string.match(key, '^\2?\255(%d+)():')
  if seq then return string.sub(key, colon + 1), seq end
end

-- Forget a delivered or removed duplicate in its task's list of extra messages.
local function forget_duplicate(key)
  local task_key, seq = duplicate_of(key)
  if not task_key then return end
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

-- Every message key of one task: its own and its duplicates'.
local function message_keys(task_key)
  local keys = {task_key}
  for seq in string.gmatch(redis.call('HGET', DUP, task_key) or '', '%S+') do
    keys[#keys + 1] = duplicate_key(task_key, seq)
  end
  return keys
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
-- had a missing or unreadable record (their entries are dropped with the others; an
-- unreadable record stays in MSG). The messages come as parallel arrays, message i at
-- index i of each (one table per field, not one per message: a batch is hundreds):
-- found.n, found.key, .record, .due (ms), .destination (nil: the queue's own list),
-- .start (payload's first byte), .expires (x-expires ms or nil), .delay_key (or nil).
local function collect_due(now, limit, budget)
  local found = {n = 0, key = {}, record = {}, due = {}, destination = {}, start = {},
                 expires = {}, delay_key = {}}
  local taken_from, missing, bytes, page_index = {}, 0, 0, 0
  while limit > 0 and bytes < budget do
    local page = redis.call('ZRANGE', PAGES, page_index, page_index, 'WITHSCORES')
    if not page[1] or tonumber(page[2]) > now then break end
    local page_key = PAGE_PREFIX .. page[1]
    local entries = redis.call('ZRANGEBYSCORE', page_key, '-inf', now, 'WITHSCORES',
                               'LIMIT', 0, limit)
    local keys = {}
    for i = 1, #entries, 2 do keys[#keys + 1] = entries[i] end
    local taken = 0
    if #keys > 0 then
      local records = redis.call('HMGET', MSG, unpack(keys))
      for i, key in ipairs(keys) do
        taken = i
        local record = records[i]
        local due, destination, start, expires, delay_key
        if record then due, destination, start, expires, delay_key = parse(record) end
        if due then
          local n = found.n + 1
          found.n = n
          found.key[n], found.record[n], found.due[n] = key, record, tonumber(entries[2 * i])
          found.destination[n], found.start[n] = destination, start
          found.expires[n], found.delay_key[n] = expires, delay_key
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

-- Remove from their pages the entries collect_due took (a page left empty goes).
local function drop_taken(taken_from)
  for _, taken in ipairs(taken_from) do
    local number, page_key, count = taken[1], taken[2], taken[3]
    if count > 0 then redis.call('ZREMRANGEBYRANK', page_key, 0, count - 1) end
    if redis.call('EXISTS', page_key) == 0 then redis.call('ZREM', PAGES, number) end
  end
end

-- The lateness (ms after the due time) of delivered messages, counted in a histogram
-- whose bucket bounds are ARGV[first..] (ascending), and written to STATS once per call
-- (non-cumulative buckets), together with the count of delivered messages; after
-- write(), histogram.count and histogram.max hold the count and the greatest lateness.
local function lateness_histogram(first)
  local bounds, names, counts = {}, {}, {}
  local count, sum, max = 0, 0, 0
  for i = first, #ARGV do
    bounds[#bounds + 1] = tonumber(ARGV[i])
    names[#names + 1] = 'late_le_' .. ARGV[i]
  end
  local histogram = {}
  function histogram.observe(late)
    count, sum = count + 1, sum + late
    if late > max then max = late end
    local bucket = 'late_le_inf'
    for i = 1, #bounds do
      if late <= bounds[i] then bucket = names[i]; break end
    end
    counts[bucket] = (counts[bucket] or 0) + 1
  end
  function histogram.write()
    histogram.count, histogram.max = count, max
    if count == 0 then return end
    redis.call('HINCRBY', STATS, 'moved', count)
    redis.call('HINCRBY', STATS, 'late_count', count)
    redis.call('HINCRBY', STATS, 'late_sum_ms', sum)
    for bucket, n in pairs(counts) do redis.call('HINCRBY', STATS, bucket, n) end
  end
  return histogram
end

-- The Redis server's time in ms: "due" is judged by it, so hosts with different clocks
-- agree.
local function server_now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Commands with many arguments, in chunks well below Lua's unpack limit.
local function call_chunked(command, key, values)
  for i = 1, #values, 1000 do
    redis.call(command, key, unpack(values, i, math.min(i + 999, #values)))
  end
end

-- Shared start of every per-queue store script (scripts.py puts it in front of each): the
-- key layout, and adding a message. The rest of the shared code is in helpers.lua, which
-- every script but the two schedule ones gets too: a publish runs this file on every call,
-- and each function a script defines costs Redis time on every call.
--
-- One queue's delayed messages live in a record hash and in small "pages" of due times:
--
-- KEYS[1]  P:{Q}:msg    hash  message key -> record (record.py), either inline
--                             '{"delayq":<due ms>,<rest of the kombu envelope>' or
--                             prefixed "<due ms>[d<len>:<destination>][x<expires ms>]
--                             [k<len>:<delay key>]:<payload>" (the destination is left out
--                             when it is the queue's own list; x: the queue's x-expires,
--                             when its publisher declared one; k: a keyed message's key)
-- KEYS[2]  P:{Q}:pages  zset  page number -> page start (<= every due time in the page;
--                             the first page's start is its earliest due time)
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
-- The first page's start is kept at its earliest due time (helpers.lua settles it after
-- entries leave the page), so a message is its queue's earliest exactly when no page
-- starts at or before its due time: the page lookup a schedule makes anyway tells it
-- whether to wake the movers, with no read of the head.
--
-- Message key: the task id packed by record.py (16 bytes for a uuid, and only then), or,
-- for a second message of the same task id, "\255<seq>:<task key>" (prefixed with "\2"
-- if that is 16 bytes long), listed under the task key in KEYS[3].

local MSG, PAGES, DUP, STATS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local PAGE_PREFIX, PAGE_MAX = ARGV[1], tonumber(ARGV[2])

local function new_page(start)
  local n = redis.call('HINCRBY', STATS, 'page_seq', 1)
  redis.call('ZADD', PAGES, start, n)
  return tostring(n)
end

-- The page a due time goes to: the last page starting at or before it; below the first
-- page, the first page (whose start is lowered). Second: true when the due time is below
-- every pending message's (no page starts at or before it).
local function page_for(due)
  local found = redis.call('ZREVRANGEBYSCORE', PAGES, due, '-inf', 'LIMIT', 0, 1)
  if found[1] then return found[1], false end
  found = redis.call('ZRANGE', PAGES, 0, 0)
  if found[1] then
    redis.call('ZADD', PAGES, due, found[1])
    return found[1], true
  end
  return new_page(due), true
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

-- Add a message key to its page; true when it is now its queue's earliest.
local function add_entry(key, due)
  local page, earliest = page_for(due)
  local page_key = PAGE_PREFIX .. page
  redis.call('ZADD', page_key, due, key)
  local size = redis.call('ZCARD', page_key)
  if size > PAGE_MAX then split(page_key, size) end
  return earliest
end

-- The message key of a task's extra message number seq (record.duplicate_key).
local function duplicate_key(task_key, seq)
  local key = '\255' .. seq .. ':' .. task_key
  if #key == 16 then return '\2' .. key end
  return key
end

-- Keep one message until it is due (schedule.lua; schedule_many.lua, per message): its
-- record (whole, due time first: the client builds it, as a concatenation here would cost
-- a copy of the payload, ~1 us a call) and page entry. A second message of the same task
-- id is kept as a duplicate. Returns the message key it is kept under, and true when it is
-- now its queue's earliest.
local function store_message(key, due, record)
  if redis.call('HSETNX', MSG, key, record) == 0 then
    local seq = redis.call('HINCRBY', STATS, 'dup_seq', 1)
    local seqs = redis.call('HGET', DUP, key)
    redis.call('HSET', DUP, key, seqs and (seqs .. ' ' .. seq) or seq)
    key = duplicate_key(key, seq)
    redis.call('HSET', MSG, key, record)
  end
  return key, add_entry(key, due)
end


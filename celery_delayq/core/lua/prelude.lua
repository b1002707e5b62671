-- Shared start of every per-queue store script (each names it first among its includes):
-- the key layout, and adding a message. The rest of the shared code is in helpers.lua, which
-- every script but the two schedule ones gets too: a publish runs this file on every call,
-- and each function a script defines costs Redis time on every call.
--
-- One queue's delayed messages live in a record hash and in small "pages" of due times:
--
-- KEYS[1]  P:{Q}:msg    hash  message key -> record (layout/record.py), either inline
--                             '{"delayq":<due ms>,<rest of the kombu envelope>' or
--                             prefixed "<due ms>[d<len>:<destination>][x<expires ms>]
--                             [k<len>:<delay key>]:<payload>" (the destination is left out
--                             when it is the queue's own list; x: the queue's x-expires,
--                             when its publisher declared one; k: a keyed message's key)
-- KEYS[2]  P:{Q}:pages  zset  page number -> page start (<= every due time in the page;
--                             the first page's start is its earliest due time)
-- KEYS[3]  P:{Q}:dup    hash  "\4<delay key>" -> "<since ms>:<message key>" for each
--                             pending keyed message (index_field); and, as stores before
--                             the by-task index wrote it, task key -> sequence numbers of
--                             its extra messages (read and emptied, never written now)
-- (formed) P:{Q}:dup:by-task  zset  the extra messages of every task, one member each,
--                             "<len>:<task key><seq>" at score 0 (extra_member): one
--                             task's are a lexicographic range, so adding, removing and
--                             reading a bounded number of them costs O(log n) however many
--                             messages share the task id
-- KEYS[4]  P:{Q}:stats  hash  counters (scheduled, moved, cancelled, lateness histogram,
--                             page_seq, dup_seq)
-- ARGV[1]  page key prefix "P:{Q}:p:"; page n is the zset P:{Q}:p:<n> of message key -> due
-- ARGV[2]  most entries a page gets before it is split (below zset-max-listpack-entries,
--          so pages stay in Redis's compact listpack encoding)
--
-- Why pages: a sorted-set entry in a big zset costs ~100 bytes of skiplist and hashtable;
-- in a listpack page it costs the key and the due time. Page keys share the queue's {Q}
-- hash tag. The pages keep these invariants:
--
-- 1. Order: every due time in page n is below the start of page n+1, and a page's start
--    is at or below each of its due times; so the first page holds the earliest
--    messages, a due time is never split across two pages, and no two pages start alike.
-- 2. The first page's start is its earliest due time (helpers.lua settles it after
--    entries leave the page), so a message is its queue's earliest exactly when no page
--    starts at or before its due time: the page lookup a schedule makes anyway tells it
--    whether to wake the movers, with no read of the head.
-- 3. Bounded work: a page of more than PAGE_MAX entries holds one single due time (a
--    "hot" page: many messages due at one instant, "every reminder at 09:00"). It only
--    ever grows by that due time; a message due at another time beside it goes to a
--    page of its own (page_for), and a hot page is never split or copied. Any other page
--    is split when it passes PAGE_MAX, moving its smaller side. So no call copies more
--    than PAGE_MAX / 2 entries, whatever the store's size or one instant's.

-- Message key: the task id packed by layout/record.py (16 bytes for a uuid, and only then), or,
-- for a second message of the same task id, "\255<seq>:<task key>" (prefixed with "\2"
-- if that is 16 bytes long), listed under the task key in KEYS[3].

local MSG, PAGES, DUP, STATS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- same hash tag as DUP (see KEYS[3] above); nil for code run without the queue's keys
local BY_TASK = DUP and DUP .. ':by-task'
local PAGE_PREFIX, PAGE_MAX = ARGV[1], tonumber(ARGV[2])

local function new_page(start)
  local n = redis.call('HINCRBY', STATS, 'page_seq', 1)
  redis.call('ZADD', PAGES, start, n)
  return tostring(n)
end

-- The single due time of a hot page (invariant 3), else nil; `size` is its ZCARD.
local function hot_due(page_key, size)
  if size < PAGE_MAX then return nil end
  local first = redis.call('ZRANGE', page_key, 0, 0, 'WITHSCORES')[2]
  local last = redis.call('ZRANGE', page_key, -1, -1, 'WITHSCORES')[2]
  if first == last then return tonumber(first) end
end

-- The page for a due time other than hot page `page`'s own (`hot`), which the lookup
-- found: below it, a new page, the hot page's start raised to its due time so the new
-- one comes first; above it, the next page when that one is not hot (its start lowered
-- to the due time), else a new page.
local function beside_hot(page, hot, due)
  if due < hot then
    redis.call('ZADD', PAGES, hot, page)
    return new_page(due)
  end
  local next_page = redis.call('ZRANGEBYSCORE', PAGES, '(' .. due, '+inf', 'LIMIT', 0, 1)[1]
  if next_page then
    local next_key = PAGE_PREFIX .. next_page
    if not hot_due(next_key, redis.call('ZCARD', next_key)) then
      redis.call('ZADD', PAGES, due, next_page)
      return next_page
    end
  end
  return new_page(due)
end

-- The page a due time goes to: the last page starting at or before it; below the first
-- page, the first page (whose start is lowered); either way, when that page is hot and
-- the due time is not its own, a page beside it. Second: true when the due time is below
-- every pending message's (no page starts at or before it). Third: the page's size (-1
-- for a hot page of this very due time: it is never split).
local function page_for(due)
  local earliest = false
  local page = redis.call('ZREVRANGEBYSCORE', PAGES, due, '-inf', 'LIMIT', 0, 1)[1]
  if not page then
    page = redis.call('ZRANGE', PAGES, 0, 0)[1]
    if not page then return new_page(due), true, 0 end
    earliest = true
  end
  local size = redis.call('ZCARD', PAGE_PREFIX .. page)
  local hot = hot_due(PAGE_PREFIX .. page, size)
  if hot then
    if hot == tonumber(due) then return page, earliest, -1 end
    page = beside_hot(page, hot, tonumber(due))
    return page, earliest, redis.call('ZCARD', PAGE_PREFIX .. page)
  end
  if earliest then redis.call('ZADD', PAGES, due, page) end
  return page, earliest, size
end

-- Split a full page where the due time changes, nearest its middle, in O(log n) reads,
-- moving the smaller side to a new page (at most PAGE_MAX / 2 entries: only a page of
-- at most PAGE_MAX + 1 entries is split). A page of one single due time is left to grow
-- (a hot page, invariant 3).
local function split(page, size)
  local page_key = PAGE_PREFIX .. page
  local middle = redis.call('ZRANGE', page_key, math.floor(size / 2), math.floor(size / 2),
                            'WITHSCORES')[2]
  local below = redis.call('ZCOUNT', page_key, '-inf', '(' .. middle)  -- rank of its first
  local through = redis.call('ZCOUNT', page_key, '-inf', middle)      -- rank after its last
  local cut = below
  if below == 0 or (through < size and through - size / 2 < size / 2 - below) then
    cut = through
  end
  if cut == 0 or cut == size then return end
  local lower = cut <= size - cut
  local entries
  if lower then
    entries = redis.call('ZRANGE', page_key, 0, cut - 1, 'WITHSCORES')
    local upper_start = redis.call('ZRANGE', page_key, cut, cut, 'WITHSCORES')[2]
    local start = redis.call('ZSCORE', PAGES, page)
    redis.call('ZADD', PAGES, upper_start, page)  -- raised first: starts stay distinct
    page_key = PAGE_PREFIX .. new_page(start)
  else
    entries = redis.call('ZRANGE', page_key, cut, -1, 'WITHSCORES')
    page_key = PAGE_PREFIX .. new_page(entries[2])
  end
  local chunk = {}
  for i = 1, #entries, 2 do
    chunk[#chunk + 1] = entries[i + 1]
    chunk[#chunk + 1] = entries[i]
  end
  redis.call('ZADD', page_key, unpack(chunk))  -- at most PAGE_MAX entries: one call
  if lower then
    redis.call('ZREMRANGEBYRANK', PAGE_PREFIX .. page, 0, cut - 1)
  else
    redis.call('ZREMRANGEBYRANK', PAGE_PREFIX .. page, cut, -1)
  end
end

-- Add a message key to its page; true when it is now its queue's earliest.
local function add_entry(key, due)
  local page, earliest, size = page_for(due)
  if redis.call('ZADD', PAGE_PREFIX .. page, due, key) == 1 and size >= PAGE_MAX then
    split(page, size + 1)
  end
  return earliest
end

-- The message key of a task's extra message number seq (record.duplicate_key).
local function duplicate_key(task_key, seq)
  local key = '\255' .. seq .. ':' .. task_key
  if #key == 16 then return '\2' .. key end
  return key
end

-- The start of every BY_TASK member of one task (record.extra_prefix): the length makes
-- it no other task's start, so a task's members are the range after it.
local function extra_prefix(task_key)
  return #task_key .. ':' .. task_key
end

-- Keep a message's record (whole, due time first: the client builds it, as a
-- concatenation here would cost a copy of the payload, ~1 us a call). A second message of
-- the same task id is kept as a duplicate, numbered from a queue-wide counter (so no
-- duplicate's key is ever used twice) and indexed in BY_TASK. Returns the message key it
-- is kept under.
local function keep_record(key, record)
  if redis.call('HSETNX', MSG, key, record) == 0 then
    local seq = redis.call('HINCRBY', STATS, 'dup_seq', 1)
    redis.call('ZADD', BY_TASK, 0, extra_prefix(key) .. seq)
    key = duplicate_key(key, seq)
    redis.call('HSET', MSG, key, record)
  end
  return key
end

-- Keep one message until it is due (schedule.lua; schedule_many.lua, per message): its
-- record and page entry. Returns the message key it is kept under, and true when it is
-- now its queue's earliest.
local function store_message(key, due, record)
  key = keep_record(key, record)
  return key, add_entry(key, due)
end

-- Count a published message, and when it is its queue's earliest (`earliest`), list the
-- queue for the movers (`registry`, nil on a Redis Cluster) and wake them for `due` (ms;
-- nil: none to wake for) on `channel`. Returns 1 when they were woken, else 0
-- (schedule.lua's reply).
local function announce(earliest, due, registry, queue, channel)
  redis.call('HINCRBY', STATS, 'scheduled', 1)
  if not earliest then return 0 end
  if registry then redis.call('SADD', registry, queue) end
  if not due then return 0 end
  redis.call('PUBLISH', channel, due)
  return 1
end


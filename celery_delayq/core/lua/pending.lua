--! include prelude.lua
--! include helpers.lua
-- List pending messages by due time, in one atomic snapshot (after prelude.lua).
--
-- ARGV[3]  lowest due time (ms, or '-inf')   ARGV[4] highest due time (ms, or '+inf')
-- ARGV[5]  most entries to return            ARGV[6] '1' for latest first
-- ARGV[7]  optional (oldest first only): a message key; the listing then starts after it
--          among the messages due exactly at ARGV[3] (a whole ms), then goes on above it
-- Returns  flat {message key, due time, ...} in due order (within a due time, key order)
--
-- Pages are read from the page index a few at a time: a million pending messages have
-- tens of thousands of pages, and a listing needs only the first ones it reaches.

local low, high, limit, latest_first = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local after = ARGV[7] or ''
local PAGES_AT_ONCE = 32
local out = {}
local start = '-inf'

-- Whether byte string a sorts at or before b, as a sorted set orders equal scores
-- (memcmp): Lua's own comparison follows the server's collation locale.
local function at_or_before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end

-- The messages due at ms `due` whose key sorts after `after` (keyset paging through a
-- due time shared by many): a due time is never split across pages, so they are in one
-- page, where equal scores are in key order; a binary search over ranks finds the
-- first, O(log n) reads however many share the due time.
local function read_tie(due)
  local page = redis.call('ZREVRANGEBYSCORE', PAGES, due, '-inf', 'LIMIT', 0, 1)[1]
  if not page then return end
  local page_key = PAGE_PREFIX .. page
  local lo = redis.call('ZCOUNT', page_key, '-inf', '(' .. due)  -- rank of the first
  local through = redis.call('ZCOUNT', page_key, '-inf', due)   -- rank after the last
  local hi = through
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at_or_before(redis.call('ZRANGE', page_key, mid, mid)[1], after) then
      lo = mid + 1
    else
      hi = mid
    end
  end
  if lo >= through then return end
  local found = redis.call('ZRANGE', page_key, lo, math.min(through, lo + limit) - 1,
                           'WITHSCORES')
  for j = 1, #found do out[#out + 1] = found[j] end
end

if after ~= '' and not latest_first then
  if high == '+inf' or tonumber(low) <= tonumber(high) then read_tie(low) end
  start = redis.call('ZREVRANGEBYSCORE', PAGES, low, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
          or '-inf'
  low = '(' .. low
elseif not latest_first then  -- from the last page starting below low: earlier pages end below low
  local first = redis.call('ZREVRANGEBYSCORE', PAGES, '(' .. low, '-inf', 'WITHSCORES',
                           'LIMIT', 0, 1)
  start = first[2] or '-inf'
end

local function pages_from(offset)
  if latest_first then
    return redis.call('ZREVRANGEBYSCORE', PAGES, high, '-inf', 'WITHSCORES',
                      'LIMIT', offset, PAGES_AT_ONCE)
  end
  return redis.call('ZRANGEBYSCORE', PAGES, start, high, 'WITHSCORES',
                    'LIMIT', offset, PAGES_AT_ONCE)
end

-- Add a page's entries within the window; false once no later page can have any.
local function read_page(page, page_start)
  local need = limit - #out / 2
  if need <= 0 then return false end
  local page_key = PAGE_PREFIX .. page
  local found
  if latest_first then
    found = redis.call('ZREVRANGEBYSCORE', page_key, high, low, 'WITHSCORES', 'LIMIT', 0, need)
  else
    found = redis.call('ZRANGEBYSCORE', page_key, low, high, 'WITHSCORES', 'LIMIT', 0, need)
  end
  for j = 1, #found do out[#out + 1] = found[j] end
  return not (latest_first and low ~= '-inf' and tonumber(page_start) < tonumber(low))
end

local offset = 0
repeat
  local pages = pages_from(offset)
  local going = #pages > 0
  for i = 1, #pages, 2 do
    going = read_page(pages[i], pages[i + 1])
    if not going then break end
  end
  offset = offset + PAGES_AT_ONCE
until not going
return out

-- List pending messages by due time, in one atomic snapshot (after prelude.lua).
--
-- ARGV[3]  lowest due time (ms, or '-inf')   ARGV[4] highest due time (ms, or '+inf')
-- ARGV[5]  most entries to return            ARGV[6] '1' for latest first
-- Returns  flat {message key, due time, ...} in due order
--
-- Pages are read from the page index a few at a time: a million pending messages have
-- tens of thousands of pages, and a listing needs only the first ones it reaches.

local low, high, limit, latest_first = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local PAGES_AT_ONCE = 32
local out = {}
local start = '-inf'
if not latest_first then  -- from the last page starting below low: earlier pages end below low
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

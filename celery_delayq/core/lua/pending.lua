-- List pending messages by due time, in one atomic snapshot (after prelude.lua).
--
-- ARGV[3]  lowest due time (ms, or '-inf')   ARGV[4] highest due time (ms, or '+inf')
-- ARGV[5]  most entries to return            ARGV[6] '1' for latest first
-- Returns  flat {message key, due time, ...} in due order

local low, high, limit, latest_first = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local out = {}
local pages
if latest_first then
  pages = redis.call('ZREVRANGEBYSCORE', PAGES, high, '-inf', 'WITHSCORES')
else  -- from the last page starting below low: earlier pages end below low
  local first = redis.call('ZREVRANGEBYSCORE', PAGES, '(' .. low, '-inf', 'WITHSCORES',
                           'LIMIT', 0, 1)
  pages = redis.call('ZRANGEBYSCORE', PAGES, first[2] or '-inf', high, 'WITHSCORES')
end
for i = 1, #pages, 2 do
  local need = limit - #out / 2
  if need <= 0 then break end
  local page_key = PAGE_PREFIX .. pages[i]
  local found
  if latest_first then
    found = redis.call('ZREVRANGEBYSCORE', page_key, high, low, 'WITHSCORES', 'LIMIT', 0, need)
  else
    found = redis.call('ZRANGEBYSCORE', page_key, low, high, 'WITHSCORES', 'LIMIT', 0, need)
  end
  for j = 1, #found do out[#out + 1] = found[j] end
  if latest_first and low ~= '-inf' and tonumber(pages[i + 1]) < tonumber(low) then break end
end
return out

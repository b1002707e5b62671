-- ARGV[3] low score  ARGV[4] high score  ARGV[5] limit  ARGV[6] '1' for newest first
-- Returns flat {key, score, ...} in due order (one atomic snapshot), at most limit pairs.
local low, high, limit, rev = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local out = {}
local pages
if rev then
  pages = redis.call('ZREVRANGEBYSCORE', PAGES, high, '-inf', 'WITHSCORES')
else  -- from the last page starting strictly below low (earlier pages end below low)
  local first = redis.call('ZREVRANGEBYSCORE', PAGES, '(' .. low, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  pages = redis.call('ZRANGEBYSCORE', PAGES, first[2] or '-inf', high, 'WITHSCORES')
end
for i = 1, #pages, 2 do
  local need = limit - #out / 2
  if need <= 0 then break end
  local r
  if rev then r = redis.call('ZREVRANGEBYSCORE', PFX .. pages[i], high, low, 'WITHSCORES', 'LIMIT', 0, need)
  else r = redis.call('ZRANGEBYSCORE', PFX .. pages[i], low, high, 'WITHSCORES', 'LIMIT', 0, need) end
  for j = 1, #r do out[#out + 1] = r[j] end
  if rev and low ~= '-inf' and tonumber(pages[i + 1]) < tonumber(low) then break end
end
return out

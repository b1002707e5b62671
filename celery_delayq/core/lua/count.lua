-- Count pending messages per due-time window (after prelude.lua); for backlog and
-- `status --timeline`. A page lying wholly inside a window is counted with ZCARD.
--
-- ARGV[3..] ascending window edges in ms ('-inf' and '+inf' allowed)
-- Returns  {next due time in ms or -1, count in [edge 1, edge 2), [edge 2, edge 3), ...}

local function edge(text)
  if text == '-inf' then return -math.huge end
  if text == '+inf' then return math.huge end
  return tonumber(text)
end
local edges, counts = {}, {}
for i = 3, #ARGV do edges[#edges + 1] = edge(ARGV[i]) end
for i = 1, #edges - 1 do counts[i] = 0 end

local pages = redis.call('ZRANGE', PAGES, 0, -1, 'WITHSCORES')
for p = 1, #pages, 2 do
  local start = tonumber(pages[p + 1])
  local stop = pages[p + 3] and tonumber(pages[p + 3]) or math.huge  -- next page's start
  local page_key = PAGE_PREFIX .. pages[p]
  for w = 1, #edges - 1 do
    local low, high = edges[w], edges[w + 1]
    if low < stop and high > start then
      if low <= start and high >= stop then
        counts[w] = counts[w] + redis.call('ZCARD', page_key)
      else
        counts[w] = counts[w] + redis.call('ZCOUNT', page_key, ARGV[w + 2], '(' .. ARGV[w + 3])
      end
    end
  end
end

local _, next_due = head()
local result = {next_due and tonumber(next_due) or -1}
for i = 1, #counts do result[#result + 1] = counts[i] end
return result

--! include prelude.lua
--! include helpers.lua
-- Count pending messages per due-time window (after prelude.lua); for backlog and
-- `status --timeline`. A page lying wholly inside a window is counted with ZCARD. One
-- call reads at most ARGV[4] pages, so its work does not grow with the store: the caller
-- calls again from where it stopped (the counts of a queue that changes meanwhile are
-- then approximate, as any count of a live queue is).
--
-- ARGV[3]  read the pages starting after this (a ZRANGEBYSCORE bound: '-inf' at first,
--          then '(' .. the previous call's last page start)
-- ARGV[4]  most pages to read in this call
-- ARGV[5..] ascending window edges in ms ('-inf' and '+inf' allowed)
-- Returns  {next due time in ms or -1, start of the last page read ('' when no page is
--          left to read), count in [edge 1, edge 2), [edge 2, edge 3), ...}

local function edge(text)
  if text == '-inf' then return -math.huge end
  if text == '+inf' then return math.huge end
  return tonumber(text)
end
local most = tonumber(ARGV[4])
local edges, counts = {}, {}
for i = 5, #ARGV do edges[#edges + 1] = edge(ARGV[i]) end
for i = 1, #edges - 1 do counts[i] = 0 end

-- one page beyond those read: its start is where the last one read stops
local pages = redis.call('ZRANGEBYSCORE', PAGES, ARGV[3], '+inf', 'WITHSCORES',
                         'LIMIT', 0, most + 1)
local read = math.min(#pages, 2 * most)
for p = 1, read, 2 do
  local start = tonumber(pages[p + 1])
  local stop = pages[p + 3] and tonumber(pages[p + 3]) or math.huge  -- next page's start
  local page_key = PAGE_PREFIX .. pages[p]
  for w = 1, #edges - 1 do
    local low, high = edges[w], edges[w + 1]
    if low < stop and high > start then
      if low <= start and high >= stop then
        counts[w] = counts[w] + redis.call('ZCARD', page_key)
      else
        counts[w] = counts[w] + redis.call('ZCOUNT', page_key, ARGV[w + 4], '(' .. ARGV[w + 5])
      end
    end
  end
end

local _, next_due = head()
local result = {next_due and tonumber(next_due) or -1, #pages > read and pages[read] or ''}
for i = 1, #counts do result[#result + 1] = counts[i] end
return result

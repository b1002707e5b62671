-- Shared prelude of the paged store (prototype). Every script:
-- KEYS[1] P:{Q}:msg   hash  task key -> record "<due ms>[d<len>:<dest>]:<payload>"
-- KEYS[2] P:{Q}:pages zset  page number -> page start (lower bound of its due times)
-- KEYS[3] P:{Q}:dup   hash  task key -> space-separated dup sequence numbers (rare)
-- KEYS[4] P:{Q}:stats hash  counters (+ page_seq, dup_seq)
-- ARGV[1] page key prefix "P:{Q}:p:"   ARGV[2] page size limit (< zset-max-listpack-entries)
local MSG, PAGES, DUP, STATS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local PFX, PAGE_MAX = ARGV[1], tonumber(ARGV[2])

-- due, destination (nil = the queue's default list), index of the payload's first byte
local function parse(rec)
  local due_end = string.find(rec, '[^0-9]')
  if not due_end or due_end == 1 then return nil end
  local due, dest, pos = string.sub(rec, 1, due_end - 1), nil, due_end
  if string.sub(rec, pos, pos) == 'd' then
    local colon = string.find(rec, ':', pos, true)
    local len = colon and tonumber(string.sub(rec, pos + 1, colon - 1))
    if not len then return nil end
    dest = string.sub(rec, colon + 1, colon + len)
    pos = colon + len + 1
  end
  if string.sub(rec, pos, pos) ~= ':' then return nil end
  return due, dest, pos + 1
end

local function new_page(score)
  local n = redis.call('HINCRBY', STATS, 'page_seq', 1)
  redis.call('ZADD', PAGES, score, n)
  return tostring(n)
end

-- the page a new entry with this score goes to: last page (in (start, number) order)
-- whose start <= score; below the first page, the first page (its start is lowered)
local function page_for(score)
  local r = redis.call('ZREVRANGEBYSCORE', PAGES, score, '-inf', 'LIMIT', 0, 1)
  if r[1] then return r[1] end
  r = redis.call('ZRANGE', PAGES, 0, 0)
  if r[1] then redis.call('ZADD', PAGES, score, r[1]); return r[1] end
  return new_page(score)
end

local function add_entry(k, score)
  local n = page_for(score)
  local key = PFX .. n
  redis.call('ZADD', key, score, k)
  local card = redis.call('ZCARD', key)
  if card > PAGE_MAX then
    -- split where the score changes, nearest the middle, so no score spans two pages
    -- (page starts stay distinct); a page of one single score is left to grow
    local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    local half, cut = math.floor(card / 2), nil
    for d = 0, card do
      local i = half + d
      if i < card and i > 0 and all[2 * i + 2] ~= all[2 * i] then cut = i; break end
      i = half - d
      if i > 0 and i < card and all[2 * i + 2] ~= all[2 * i] then cut = i; break end
      if half + d >= card and half - d <= 0 then break end
    end
    if cut then
      local args = {}
      for i = 2 * cut + 1, #all, 2 do args[#args + 1] = all[i + 1]; args[#args + 1] = all[i] end
      local m = new_page(all[2 * cut + 2])
      redis.call('ZADD', PFX .. m, unpack(args))
      redis.call('ZREMRANGEBYRANK', key, cut, -1)
    end
  end
end

-- remove k (due score) from its page; pages whose start equals score (ties spanning
-- pages) and the last page starting below it are the only candidates
local function remove_entry(k, score)
  local off, s = 0, tonumber(score)
  while true do
    local r = redis.call('ZREVRANGEBYSCORE', PAGES, score, '-inf', 'WITHSCORES', 'LIMIT', off, 1)
    if not r[1] then return 0 end
    local key = PFX .. r[1]
    if redis.call('ZREM', key, k) == 1 then
      if redis.call('EXISTS', key) == 0 then redis.call('ZREM', PAGES, r[1]) end
      return 1
    end
    if tonumber(r[2]) < s then return 0 end
    off = off + 1
  end
end

local function head()
  local fp = redis.call('ZRANGE', PAGES, 0, 0)
  if not fp[1] then return nil end
  local first = redis.call('ZRANGE', PFX .. fp[1], 0, 0, 'WITHSCORES')
  return first[1], first[2]
end

-- dup keys: "\255<seq>:<base key>" (never 16 bytes long, never a text/uuid key)
local function dup_base(k)
  if #k ~= 16 and string.byte(k, 1) == 255 then
    local colon = string.find(k, ':', 2, true)
    return string.sub(k, colon + 1), string.sub(k, 2, colon - 1)
  end
end

local function undup(k)
  local base, seq = dup_base(k)
  if not base then return end
  local seqs = redis.call('HGET', DUP, base)
  if not seqs then return end
  local rest = {}
  for s in string.gmatch(seqs, '%S+') do if s ~= seq then rest[#rest + 1] = s end end
  if #rest == 0 then redis.call('HDEL', DUP, base)
  else redis.call('HSET', DUP, base, table.concat(rest, ' ')) end
end

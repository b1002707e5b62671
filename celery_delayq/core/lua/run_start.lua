-- Start one run of a periodic entry, or skip it: a worker calls it as the entry's task
-- starts (worker/periodic_runs.py), and runs the task body only when it returns 1.
--
-- With a lease (the entry's overlap is "skip"), a run whose entry has another
-- occurrence's run still going (its running mark held, its lease not over) is skipped,
-- and the skip counted; else this run takes the mark, for the lease. The same
-- occurrence's mark (a retry, a redelivery) is no overlap: it is the same run, again.
-- A started run is the entry's last run, and is counted; a retry or a redelivery of the
-- occurrence last counted is not counted again (so with skips). One key: it runs on a
-- Redis Cluster too; a few field reads and writes, whatever the input.
--
-- KEYS[1]  P:periodic:counts  hash  'last:<entry>' -> '<occurrence ms> <started ms>';
--                                   'runs:<entry>' / 'counted:<entry>' -> the runs
--                                   counted, the occurrence last counted (ms);
--                                   'skipped:<entry>' / 'skip-counted:<entry>' -> the
--                                   same for skips; 'running:<entry>' ->
--                                   '<occurrence ms> <lease end ms>' (Redis's clock)
-- ARGV[1]  entry name
-- ARGV[2]  the occurrence the run stands for (ms)
-- ARGV[3]  when the worker started it (ms, the worker's clock: shown as its start)
-- ARGV[4]  the running mark's lease (ms); 0: overlap "allow", no mark
-- Returns  {1 started or 0 skipped, the entry's runs counted, its skips counted}

local COUNTS, name, occurrence, started = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local lease = tonumber(ARGV[4]) or 0
-- the longest lease a worker takes (worker/periodic_runs.py MAX_LEASE): a mark that
-- ends further ahead is none this code wrote, and holds nothing
local MAX_LEASE_MS = 7 * 24 * 3600 * 1000

-- count one more '<kind>:<entry>', unless the occurrence is the one last counted; a
-- count that is no integer (crafted) starts again at one
local function count_once(kind, last)
  local field, seen = kind .. ':' .. name, last .. ':' .. name
  if redis.call('HGET', COUNTS, seen) == occurrence then
    return tonumber(redis.call('HGET', COUNTS, field) or '0') or 0
  end
  redis.call('HSET', COUNTS, seen, occurrence)
  local before = redis.call('HGET', COUNTS, field)
  if before and not string.match(before, '^%d%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$') then
    redis.call('HSET', COUNTS, field, 0)  -- HINCRBY would refuse it
  end
  return redis.call('HINCRBY', COUNTS, field, 1)
end

local function count_of(kind)
  return tonumber(redis.call('HGET', COUNTS, kind .. ':' .. name) or '0') or 0
end

if lease > 0 then
  local running = 'running:' .. name
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local mark = redis.call('HGET', COUNTS, running)
  local held, ends = string.match(mark or '', '^(%d+) (%d+)$')
  local left = (tonumber(ends) or 0) - now
  if held and held ~= occurrence and left > 0 and left <= MAX_LEASE_MS then
    return {0, count_of('runs'), count_once('skipped', 'skip-counted')}
  end
  redis.call('HSET', COUNTS, running, occurrence .. ' ' .. string.format('%.0f', now + lease))
end
redis.call('HSET', COUNTS, 'last:' .. name, occurrence .. ' ' .. started)
return {1, count_once('runs', 'counted'), count_of('skipped')}

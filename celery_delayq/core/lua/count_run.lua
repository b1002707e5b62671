-- Count one run of a periodic entry, once per occurrence: a worker calls it as the entry's
-- task starts (worker/periodic_runs.py). A retry or a redelivery of the run last counted
-- stands for the same occurrence, and is not counted again. One key: it runs on a Redis
-- Cluster too.
--
-- KEYS[1]  P:periodic:counts  hash  'runs:<entry>' -> the runs counted;
--                                   'counted:<entry>' -> the occurrence last counted (ms)
-- ARGV[1]  entry name
-- ARGV[2]  the occurrence the run stands for (ms)
-- Returns  the entry's runs counted so far

local COUNTS, name, occurrence = KEYS[1], ARGV[1], ARGV[2]
local last, runs = 'counted:' .. name, 'runs:' .. name
if redis.call('HGET', COUNTS, last) == occurrence then
  return tonumber(redis.call('HGET', COUNTS, runs) or '0')
end
redis.call('HSET', COUNTS, last, occurrence)
return redis.call('HINCRBY', COUNTS, runs, 1)

-- End a periodic entry's run: a worker calls it as the task returns, fails or is retried
-- (worker/periodic_runs.py), and the entry's next occurrence may start. Only the run that
-- holds the running mark drops it (run_start.lua).
--
-- KEYS[1]  P:periodic:counts  hash  'running:<entry>' -> '<occurrence ms> <lease end ms>'
-- ARGV[1]  entry name
-- ARGV[2]  the occurrence the run stood for (ms)
-- Returns  1 when the mark was this run's and is dropped, else 0

local COUNTS, running, occurrence = KEYS[1], 'running:' .. ARGV[1], ARGV[2]
local mark = redis.call('HGET', COUNTS, running)
if mark and string.match(mark, '^(%d+) ') == occurrence then
  return redis.call('HDEL', COUNTS, running)
end
return 0

--! include prelude.lua
--! include helpers.lua
-- Store one delayed message under a delay key (after prelude.lua): while a message with
-- the same key is pending in this queue (shard), the new one replaces it, is dropped, or
-- is refused, in this one atomic call (core/layout/delay_keys.py explains the modes).
--
-- KEYS[5]  P:queues  set  as in schedule.lua (left out on a Redis Cluster)
-- ARGV[3]  task key
-- ARGV[4]  due time, integer milliseconds since the epoch
-- ARGV[5]  the record (as in schedule.lua), with its "k<len>:<delay key>" field
-- ARGV[6]  queue name (member of KEYS[5])
-- ARGV[7]  wake-up pubsub channel
-- ARGV[8]  delay key
-- ARGV[9]  when the key is held: 'replace', 'keep' or 'reject'
-- ARGV[10] max wait (ms): a replace never pushes the due time later than this after the
--          first pending message of the key was scheduled; 0: no limit
-- ARGV[11] where the payload's ETA value starts in ARGV[5] (1-based; 0: unknown), and
-- ARGV[12] its length: when max_wait brings the due time forward, the ETA is rewritten
--          to it, or the worker would hold the task until the ETA it was sent with
-- Returns  {outcome, message key, due time}:
--          0 stored, key free: the new message's key and due time
--          1 stored, replacing the pending message: the replaced message's key, new due
--          2 dropped (keep): the pending message's key and due time
--          3 refused (reject): the pending message's key and due time

-- Epoch milliseconds as an ISO 8601 UTC time, as a Celery eta header spells it (the
-- days-to-date conversion is Howard Hinnant's civil_from_days).
local function iso_utc(ms)
  local seconds = math.floor(ms / 1000)
  local z = math.floor(seconds / 86400) + 719468
  local era = math.floor(z / 146097)
  local day_of_era = z - era * 146097
  local year_of_era = math.floor((day_of_era - math.floor(day_of_era / 1460)
    + math.floor(day_of_era / 36524) - math.floor(day_of_era / 146096)) / 365)
  local day_of_year = day_of_era - (365 * year_of_era + math.floor(year_of_era / 4)
    - math.floor(year_of_era / 100))
  local shifted_month = math.floor((5 * day_of_year + 2) / 153)
  local day = day_of_year - math.floor((153 * shifted_month + 2) / 5) + 1
  local month = shifted_month < 10 and shifted_month + 3 or shifted_month - 9
  local year = year_of_era + era * 400 + (month <= 2 and 1 or 0)
  local of_day = seconds % 86400
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03d000+00:00', year, month, day,
    math.floor(of_day / 3600), math.floor(of_day % 3600 / 60), of_day % 60, ms % 1000)
end

local now = server_now()
local delay_key, on_held, max_wait = ARGV[8], ARGV[9], tonumber(ARGV[10])
local due, since, outcome, replaced = tonumber(ARGV[4]), now, 0, nil

local pending, held_since = key_holder(delay_key)
local pending_record = pending and redis.call('HGET', MSG, pending)
if pending_record then
  if on_held ~= 'replace' then
    redis.call('HINCRBY', STATS, on_held == 'keep' and 'dropped' or 'refused', 1)
    local pending_due = parse(pending_record)
    return {on_held == 'keep' and 2 or 3, pending, tonumber(pending_due) or 0}
  end
  remove_message(pending, pending_record)
  forget_duplicate(pending)
  redis.call('HINCRBY', STATS, 'replaced', 1)
  since, outcome, replaced = held_since, 1, pending
end
local record, due_text = ARGV[5], ARGV[4]
local eta_at, eta_length = tonumber(ARGV[11]), tonumber(ARGV[12])
if max_wait > 0 and since + max_wait < due then
  due = since + max_wait
  due_text = string.format('%d', due)
  if eta_at > 0 then
    record = record:sub(1, eta_at - 1) .. iso_utc(due) .. record:sub(eta_at + eta_length)
  end
  record = with_due(record, ARGV[4], due_text)
end

local key = store_message(ARGV[3], due_text, record)
redis.call('HSET', DUP, index_field(delay_key), since .. ':' .. key)
if KEYS[5] then redis.call('SADD', KEYS[5], ARGV[6]) end
redis.call('HINCRBY', STATS, 'scheduled', 1)
if head() == key then redis.call('PUBLISH', ARGV[7], due) end
return {outcome, replaced or key, due}

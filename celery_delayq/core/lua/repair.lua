--! include prelude.lua
--! include helpers.lua
-- Make one message's schedule entry and duplicate listing agree with its record, checked
-- inside the script so a concurrent move, cancel or schedule is never undone (used by
-- `doctor --repair`; after prelude.lua).
--
-- KEYS[5]  P:{Q}:dead      hash  an unreadable record goes there (the dead letters)
-- KEYS[6]  P:{Q}:dead:why  hash  message key -> "<ms when> 0 unreadable record: <reason>"
-- ARGV[3]  message key
-- ARGV[4]  number of a page where an entry for it was seen that may be wrong, or ''
--          (the entry may break the page order, so it is removed from that very page)
-- Returns  1 when the message is now scheduled at its record's due time; 0 when it has
--          no readable record (and then no page entry or duplicate listing either: an
--          unreadable record is moved to the dead letters with the reason)

local key, seen_page = ARGV[3], ARGV[4]
local record = redis.call('HGET', MSG, key)
local due, reason
if record then due, reason = parse(record) end
if seen_page ~= '' then
  redis.call('ZREM', PAGE_PREFIX .. seen_page, key)
  if redis.call('EXISTS', PAGE_PREFIX .. seen_page) == 0 then
    redis.call('ZREM', PAGES, seen_page)
  end
end
if not due then
  if record then
    bury(key, record, reason, KEYS[5], KEYS[6], server_now())
  end
  forget_duplicate(key)
  return 0
end
remove_entry(key, due)
add_entry(key, due)
local task_key, seq = duplicate_of(key)
if task_key then redis.call('ZADD', BY_TASK, 0, extra_prefix(task_key) .. seq) end
return 1

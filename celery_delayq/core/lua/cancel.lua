--! include prelude.lua
--! include helpers.lua
-- Remove the pending messages of one Celery task (after prelude.lua and helpers.lua): its
-- first message and at most ARGV[4] of its extra messages (duplicates) a call, so that no
-- call's work grows with how many messages share the task id. The caller calls again,
-- from the cursor the reply gives, until it is ''; each call is atomic, so a message is
-- either removed here or moved by a mover, never both. A message a mover has claimed to
-- hand it to another broker (handover.lua) is on its way there: it is left to that mover,
-- which delivers it or gives it back to the schedule (where a later cancel finds it).
--
-- KEYS[5]  P:{Q}:inflight  zset  claimed message keys (handover.lua)
-- ARGV[3]  task key
-- ARGV[4]  most extra messages to look at in this call
-- ARGV[5]  cursor: '' at first, then what the call before returned
-- Returns  {how many messages were removed (0: already delivered, or never delayed here),
--           the cursor of the next call, '' when there is none to make}

local task_key, most, after = ARGV[3], tonumber(ARGV[4]), ARGV[5]
-- The cursor once BY_TASK is done: past every member (each starts with a digit).
local LISTED = '~'
local removed = 0

-- Remove one message; false when a mover holds it (claimed), else true (gone).
local function cancel(key)
  local record = redis.call('HGET', MSG, key)
  if not record then return true end
  if redis.call('ZSCORE', KEYS[5], key) then return false end
  remove_message(key, record)
  removed = removed + 1
  return true
end

cancel(task_key)
local share, cursor = most, ''
if after ~= LISTED then
  local keys, members = extra_messages(task_key, most, after)
  local gone = {}
  for i, key in ipairs(keys) do
    if cancel(key) then gone[#gone + 1] = members[i] end
  end
  call_chunked('ZREM', BY_TASK, gone)
  share = most - #members
  if share == 0 then cursor = members[#members] end
end

-- Extra messages listed in DUP by a store written before BY_TASK: as many as are left of
-- this call's share; the rest listed again, those a mover holds last, so that the next
-- call starts with the ones not looked at.
local listed = share > 0 and redis.call('HGET', DUP, task_key)
if listed then
  local rest, held = {}, {}
  for seq in string.gmatch(listed, '%S+') do
    if share <= 0 then
      rest[#rest + 1] = seq
    else
      share = share - 1
      if not cancel(duplicate_key(task_key, seq)) then held[#held + 1] = seq end
    end
  end
  if #rest > 0 then cursor = LISTED end
  for _, seq in ipairs(held) do rest[#rest + 1] = seq end
  if #rest == 0 then
    redis.call('HDEL', DUP, task_key)
  else
    redis.call('HSET', DUP, task_key, table.concat(rest, ' '))
  end
end
if removed > 0 then redis.call('HINCRBY', STATS, 'cancelled', removed) end
return {removed, cursor}

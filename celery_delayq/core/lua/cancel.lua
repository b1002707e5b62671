-- Remove the pending messages of one Celery task (after prelude.lua and helpers.lua): its
-- first message and at most ARGV[4] of its extra messages (duplicates) a call, so that no
-- call's work grows with how many messages share the task id. The caller calls again
-- while the reply says more may be left; each call is atomic, so a message is either
-- removed here or moved by a mover, never both.
--
-- ARGV[3]  task key
-- ARGV[4]  most extra messages to remove in this call
-- Returns  {how many messages were removed (0: already delivered, or never delayed here),
--           1 when extra messages may be left for another call, else 0}

local task_key, most = ARGV[3], tonumber(ARGV[4])
local removed = 0

local function cancel(key)
  local record = redis.call('HGET', MSG, key)
  if record then
    remove_message(key, record)
    removed = removed + 1
  end
end

cancel(task_key)
local keys, members = extra_messages(task_key, most)
for _, key in ipairs(keys) do cancel(key) end
call_chunked('ZREM', BY_TASK, members)
local more = #members == most

-- Extra messages listed in DUP by a store written before BY_TASK: as many as are left
-- of this call's share, the rest listed again for the next call.
local listed = not more and redis.call('HGET', DUP, task_key)
if listed then
  local rest, share = {}, most - #members
  for seq in string.gmatch(listed, '%S+') do
    if share > 0 then
      cancel(duplicate_key(task_key, seq))
      share = share - 1
    else
      rest[#rest + 1] = seq
    end
  end
  if #rest == 0 then
    redis.call('HDEL', DUP, task_key)
  else
    redis.call('HSET', DUP, task_key, table.concat(rest, ' '))
    more = true
  end
end
if removed > 0 then redis.call('HINCRBY', STATS, 'cancelled', removed) end
return {removed, more and 1 or 0}

--! include prelude.lua
--! include helpers.lua
--! include handover.lua
-- The broker confirmed these claimed messages: forget them (after prelude.lua and
-- handover.lua). A claim that is no longer ours (it expired and another mover took the
-- message) is left alone: that mover acks or gives it back. A message a flow-control
-- bucket released (its record still names its gate) waited for its limits, not for a
-- mover: it is counted as acked but, as move_due.lua does, kept out of the lateness
-- histogram and the moved count (its release was counted as released: gates.lua).
--
-- ARGV[3]  owner of the claims
-- ARGV[4]  n, how many message keys follow
-- ARGV[5..4+n] message keys
-- ARGV[5+n..]  upper bounds (ms) of the lateness histogram buckets, ascending
-- Returns  {messages acked, server time in ms, greatest lateness (ms) among those
--           observed}

local now = server_now()
local owner, last_key = ARGV[3], 4 + tonumber(ARGV[4])
local lateness = lateness_histogram(last_key + 1)
local released = 0
for i = 5, last_key do
  local key = ARGV[i]
  if redis.call('HGET', CLAIMS, key) == owner then
    unclaim(key)
    local record = redis.call('HGET', MSG, key)
    local due, _, gate
    if record then due, _, _, _, _, gate = parse(record) end
    if due and gate then
      released = released + 1
    elseif due then
      lateness.observe(math.max(0, now - tonumber(due)))
    end
    redis.call('HDEL', MSG, key)
    redis.call('HDEL', TRIES, key)
    forget_duplicate(key)
  end
end
lateness.write()
return {lateness.count + released, now, lateness.max}

--! include prelude.lua
--! include helpers.lua
--! include gates.lua
-- Hold one flow-control bucket, or let it go (ops/pause.py), and re-score it in the ready
-- zset in the same atomic call, so a mover's next pass goes by the new hold:
--   pause     no release until resumed (the bucket's state then never expires)
--   throttle  no release for a while; it never shortens a longer hold or a pause
--   resume    every hold gone; the movers are woken when messages wait
--
-- KEYS[1..7] as move_due.lua takes them; KEYS[7], P:{Q}:fc:ready, names the bucket's keys
-- ARGV[3]  the bucket (layout/gates.py bucket_of); any bytes: its keys are formed under
--          KEYS[7]'s "P:{Q}:fc:", so it names no key outside them
-- ARGV[4]  "pause", "throttle" or "resume" (anything else changes nothing)
-- ARGV[5]  a throttle's length (us)
-- ARGV[6]  the movers' wake-up channel
-- Returns  {the hold now: "paused", its end (us) while it lasts, or "" for none,
--           how many messages wait in the bucket}

local bucket, action = ARGV[3], ARGV[4]
local now = server_us()
local b = open_bucket(bucket)
if action == 'pause' then
  b.hold = math.huge
  redis.call('HSET', b.state, 'hold', 'paused')
elseif action == 'throttle' then
  local hold_until = now + tonumber(ARGV[5])
  if hold_until > b.hold then
    b.hold = hold_until
    redis.call('HSET', b.state, 'hold', string.format('%d', hold_until))
  end
elseif action == 'resume' then
  b.hold = 0
  redis.call('HDEL', b.state, 'hold')
end

local waiting = redis.call('LLEN', b.waiting)
if waiting > 0 then
  local at = allowed_at(b, now, math.floor(now / 1000))
  redis.call('ZADD', READY, at, bucket)
  if action == 'resume' and at < math.huge then
    redis.call('PUBLISH', ARGV[6], math.ceil(at / 1000))
  end
end
save_bucket(b, now, 0)

local hold = ''
if b.hold == math.huge then
  hold = 'paused'
elseif b.hold > now then
  hold = string.format('%d', b.hold)
end
return {hold, waiting}

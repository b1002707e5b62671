-- The store's own schedule script (prelude.lua and schedule.lua, unchanged) as a function,
-- so that a rescue (ops/rescue/lua) schedules each message with the very code and
-- arguments a publish uses: inside it KEYS and ARGV are parameters that shadow the
-- script's own.
local function schedule(KEYS, ARGV)
--! include schedule.lua
end

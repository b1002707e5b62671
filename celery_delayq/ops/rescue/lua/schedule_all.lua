-- Shared part of the rescue scripts, which include, in order, schedule_function.lua
-- (`local function schedule(KEYS, ARGV)`: core/lua's prelude.lua and schedule.lua,
-- unchanged), this file, then their own code.
--
-- Inside `schedule`, KEYS and ARGV are parameters that shadow the script's own, so the
-- store's schedule script runs byte-for-byte as it does at publish time, on the slice of
-- keys and arguments that DelayedStore.schedule would have passed it.
--
-- schedule_all(key_offset, arg_offset) runs `schedule` for each destination queue of one
-- message. After the caller's own first key_offset keys and arg_offset arguments come:
--   ARGV[arg_offset + 1]  n, how many schedule calls (one per destination queue)
--   ARGV[arg_offset + 2]  keys per call
--   ARGV[arg_offset + 3]  arguments per call
--   then n groups of keys (in KEYS) and n groups of arguments (in ARGV), in order.

local function schedule_all(key_offset, arg_offset)
  local calls = tonumber(ARGV[arg_offset + 1])
  local nkeys = tonumber(ARGV[arg_offset + 2])
  local nargs = tonumber(ARGV[arg_offset + 3])
  for call = 0, calls - 1 do
    local keys, args = {}, {}
    for i = 1, nkeys do keys[i] = KEYS[key_offset + call * nkeys + i] end
    for i = 1, nargs do args[i] = ARGV[arg_offset + 3 + call * nargs + i] end
    schedule(keys, args)
  end
end

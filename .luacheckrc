-- luacheck settings for the store's Lua (celery_delayq/core/lua), the Redis broker's
-- (celery_delayq/brokers/redis/lua) and the rescue's (celery_delayq/ops/rescue/lua). `python .ci/lint_lua.py`
-- checks each file alone and each script as Redis runs it; see there.

-- Redis runs a script as Lua 5.1 with these globals; only what the scripts use is
-- declared (add redis.pcall, cjson, bit... here when a script needs one), so a misspelled
-- redis.call is reported too. Redis's sandbox has no files, modules or processes.
stds.redis = {read_globals = {
  redis = {fields = {"call", "pcall", "error_reply"}},
  cjson = {fields = {"decode", "encode"}},
  "KEYS", "ARGV",
}}
std = "lua51+redis"
not_globals = {"io", "os", "package", "require", "module", "dofile", "loadfile"}
max_line_length = 100

-- The locals prelude.lua defines for the code that follows it (every store script includes
-- it first: `--! include prelude.lua`).
local prelude_exports = {
  "MSG", "PAGES", "DUP", "STATS", "PAGE_PREFIX", "add_entry", "duplicate_key", "store_message",
  "BY_TASK", "extra_prefix", "keep_record", "announce",
}
-- The locals helpers.lua defines for the scripts after it (all but schedule.lua and
-- schedule_many.lua).
local helpers_exports = {
  "parse", "remove_entry", "head", "duplicate_of", "forget_duplicate", "extra_messages",
  "collect_due", "drop_taken", "bury", "bury_unreadable", "lateness_histogram", "server_now", "call_chunked",
  "index_field", "key_holder", "release_key", "hold_key_again", "remove_message", "with_due",
  "counted", "work_clock_us", "worked_us",
}
-- The locals gates.lua (flow control) defines for the scripts that take due messages, and
-- for gate_hold.lua, which holds one bucket.
local gates_exports = {"server_us", "gate_parts", "gate_usable", "enter_gate",
                       "release_gates", "next_release_ms", "most_releases", "READY", "GATES",
                       "open_bucket",
                       "allowed_at", "save_bucket", "count_gated", "release_share",
                       "publish_gated"}
-- The locals handover.lua defines for the claim -> publish -> ack scripts after it.
local handover_exports = {"INFLIGHT", "CLAIMS", "TRIES", "DEAD", "DEAD_WHY", "CLAIMER",
                          "unclaim", "dead_letter", "failed_once", "ungated"}
local exported, unused_exports = {}, {}
local from_prelude = {}
for _, name in ipairs(prelude_exports) do from_prelude[name] = true end
for _, names in ipairs({prelude_exports, helpers_exports, gates_exports, handover_exports}) do
  for _, name in ipairs(names) do
    exported[name] = true
    unused_exports[#unused_exports + 1] = "211/" .. name
  end
end

-- The names each file takes from the code put in front of it. They are declared here,
-- not inline, so that they do not apply to the assembled scripts, where a misspelled
-- name must show as an undefined global.
local function reads(names, from)
  for _, name in ipairs(names) do
    assert(from ~= "prelude.lua" or from_prelude[name], name .. " is not a prelude export")
    assert(not from:find("^prelude.lua and") or exported[name], name .. " is not exported")
  end
  return {read_globals = names}
end
local lua = "celery_delayq/core/lua/"
files[lua .. "cancel.lua"] = reads({"MSG", "DUP", "STATS", "BY_TASK", "remove_message",
                                    "extra_messages", "duplicate_key", "call_chunked"},
                                   "prelude.lua and helpers.lua")
files[lua .. "write_ahead.lua"] = reads({"MSG", "STATS", "store_message", "counted", "parse",
                                         "remove_message", "forget_duplicate", "server_now"},
                                        "prelude.lua and helpers.lua")
files[lua .. "count.lua"] = reads({"PAGES", "PAGE_PREFIX", "head"},
                                  "prelude.lua and helpers.lua")
files[lua .. "move_due.lua"] = reads({"MSG", "server_now", "lateness_histogram", "collect_due",
                                      "drop_taken", "call_chunked", "head", "forget_duplicate",
                                       "release_key", "PAGES", "PAGE_PREFIX", "bury_unreadable",
                                       "server_us", "gate_parts", "gate_usable", "enter_gate",
                                       "release_gates", "next_release_ms", "GATES",
                                       "most_releases", "add_entry", "release_share",
                                       "work_clock_us", "worked_us"},
                                     "prelude.lua, helpers.lua and gates.lua")
files[lua .. "gate_hold.lua"] = reads({"READY", "server_us", "open_bucket", "allowed_at",
                                       "save_bucket"},
                                      "prelude.lua, helpers.lua and gates.lua")
files[lua .. "gates.lua"] = reads({"MSG", "STATS", "parse", "call_chunked", "store_message",
                                   "keep_record", "add_entry", "with_due"},
                                  "prelude.lua and helpers.lua")
files[lua .. "gates.lua"].ignore = {"211/server_us", "211/gate_parts", "211/gate_usable",
                                    "211/enter_gate", "211/release_gates",
                                    "211/next_release_ms", "211/most_releases",
                                    "211/count_gated", "211/release_share",
                                    "211/publish_gated"}
files[lua .. "schedule_gated.lua"] = reads({"announce", "server_us", "count_gated",
                                            "publish_gated"},
                                           "prelude.lua, helpers.lua and gates.lua")
files[lua .. "handover.lua"] = reads({"MSG", "STATS", "parse", "add_entry", "forget_duplicate",
                                      "hold_key_again", "with_due"},
                                     "prelude.lua and helpers.lua")
files[lua .. "handover.lua"].ignore = {"211/unclaim", "211/failed_once", "211/CLAIMER",
                                       "211/ungated"}
files[lua .. "claim_due.lua"] = reads({"MSG", "server_now", "work_clock_us", "worked_us",
                                       "parse", "collect_due", "drop_taken",
                                       "head", "INFLIGHT", "CLAIMS", "CLAIMER", "unclaim",
                                       "failed_once", "release_key", "bury_unreadable",
                                       "DEAD", "DEAD_WHY", "server_us", "gate_parts",
                                       "gate_usable", "enter_gate", "release_gates",
                                       "next_release_ms", "GATES", "most_releases"},
                                      "prelude.lua, helpers.lua, handover.lua and gates.lua")
files[lua .. "ack_claimed.lua"] = reads({"MSG", "TRIES", "CLAIMS", "server_now", "parse",
                                         "lateness_histogram", "unclaim", "forget_duplicate"},
                                        "prelude.lua, helpers.lua and handover.lua")
files[lua .. "resend_dead.lua"] = reads({"MSG", "TRIES", "DEAD", "DEAD_WHY", "server_now",
                                         "parse", "add_entry", "hold_key_again", "with_due"},
                                        "prelude.lua, helpers.lua and handover.lua")
files[lua .. "release_claimed.lua"] = reads({"MSG", "TRIES", "CLAIMS", "server_now", "parse",
                                             "add_entry", "unclaim", "failed_once",
                                             "hold_key_again", "ungated"},
                                            "prelude.lua, helpers.lua and handover.lua")
files[lua .. "pending.lua"] = reads({"PAGES", "PAGE_PREFIX"}, "prelude.lua and helpers.lua")
files[lua .. "purge.lua"] = reads({"MSG", "PAGES", "DUP", "BY_TASK", "PAGE_PREFIX", "counted",
                                   "parse", "add_entry"},
                                  "prelude.lua and helpers.lua")
files[lua .. "repair.lua"] = reads({"MSG", "PAGES", "DUP", "PAGE_PREFIX", "parse", "add_entry",
                                    "remove_entry", "duplicate_of", "forget_duplicate", "bury",
                                    "server_now", "BY_TASK", "extra_prefix"},
                                   "prelude.lua and helpers.lua")
files[lua .. "replace.lua"] = reads({"MSG", "parse", "add_entry", "remove_entry", "head"},
                                    "prelude.lua and helpers.lua")
files[lua .. "schedule.lua"] = reads({"store_message", "announce"}, "prelude.lua")
files[lua .. "helpers.lua"] = reads({"MSG", "PAGES", "DUP", "STATS", "PAGE_PREFIX",
                                     "duplicate_key", "BY_TASK", "extra_prefix"}, "prelude.lua")
files[lua .. "helpers.lua"].ignore = unused_exports
files[lua .. "schedule_keyed.lua"] = reads({"MSG", "DUP", "STATS", "parse", "store_message",
                                            "head", "server_now", "key_holder", "index_field",
                                            "remove_message", "forget_duplicate", "with_due"},
                                           "prelude.lua and helpers.lua")
-- The chunk and rescue scripts: schedule_many.lua includes schedule_shard.lua (prelude.lua
-- in a function), schedule_many_gated.lua schedule_shard_gated.lua (with flow control),
-- then both schedule_chunk.lua; the rescue scripts include schedule_function.lua (prelude.lua and
-- schedule.lua in a function), then schedule_all.lua.
local rescue = "celery_delayq/ops/rescue/lua/"
files[lua .. "schedule_shard.lua"] = reads({"store_message"}, "prelude.lua")
files[lua .. "schedule_shard.lua"].ignore = {"211/schedule_shard", "212/KEYS", "212/ARGV"}
files[lua .. "schedule_function.lua"] = {ignore = {"211/schedule", "212/KEYS", "212/ARGV"}}
files[lua .. "schedule_shard_gated.lua"] = reads({"store_message", "publish_gated",
                                                  "count_gated", "server_us"},
                                                 "prelude.lua, helpers.lua and gates.lua")
files[lua .. "schedule_shard_gated.lua"].ignore = {"211/schedule_shard", "212/KEYS", "212/ARGV"}
files[lua .. "schedule_chunk.lua"] = reads({"schedule_shard"},
                                           "schedule_shard.lua or schedule_shard_gated.lua")
files[rescue .. "schedule_all.lua"] = reads({"schedule"}, "schedule_function.lua")
files[rescue .. "rescue_list.lua"] = reads({"schedule_all"}, "schedule_all.lua")
files[rescue .. "rescue_unacked.lua"] = reads({"schedule_all"}, "schedule_all.lua")

-- What a file defines for those after it is no warning when unused in the file alone,
-- nor in an assembled script (lint_lua.py passes those on stdin as assembled/<name>.lua).
-- lint_lua.py reports a prelude export that no script uses.
files[lua .. "prelude.lua"] = {ignore = unused_exports}
files[rescue .. "schedule_all.lua"].ignore = {"211/schedule_all"}
files["assembled"] = {ignore = unused_exports}

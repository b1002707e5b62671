-- ARGV[3] task key.  Returns how many messages were removed.
local base = ARGV[3]
local keys = {base}
local seqs = redis.call('HGET', DUP, base)
if seqs then
  for s in string.gmatch(seqs, '%S+') do keys[#keys + 1] = '\255' .. s .. ':' .. base end
  redis.call('HDEL', DUP, base)
end
local removed = 0
for _, k in ipairs(keys) do
  local rec = redis.call('HGET', MSG, k)
  if rec then
    local due = parse(rec)
    if due then remove_entry(k, due) end
    redis.call('HDEL', MSG, k)
    removed = removed + 1
  end
end
if removed > 0 then redis.call('HINCRBY', STATS, 'cancelled', removed) end
return removed

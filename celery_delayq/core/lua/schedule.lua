--! include prelude.lua
-- Store one delayed message until it is due (after prelude.lua).
--
-- KEYS[5]  P:queues  set  queue names the movers visit (left out on a Redis Cluster, where
--                         it is in another slot: the client adds the queue itself). The
--                         queue is added with its earliest message, so with the first
--                         message of an empty queue; purge.lua forgets it only together
--                         with all of its messages.
-- ARGV[3]  task key (a second message of the same task is kept as a duplicate)
-- ARGV[4]  due time, integer milliseconds since the epoch
-- ARGV[5]  the record (layout/record.py), due at ARGV[4]
-- ARGV[6]  queue name (member of KEYS[5])
-- ARGV[7]  wake-up pubsub channel
-- Returns  1 when the message became the earliest of its queue (movers were woken), else 0.

local _, earliest = store_message(ARGV[3], ARGV[4], ARGV[5])
return announce(earliest, ARGV[4], KEYS[5], ARGV[6], ARGV[7])

"""How the store lays out its data in Redis: the key names, a message's record, the counters each
queue keeps, and delay keys."""

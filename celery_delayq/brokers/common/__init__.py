"""What every broker's channel shares: the app's ``delayq_*`` settings, the diversion of
a future-ETA message to the delayed store, message fields and delay keys, revokes, and
a store in a Redis of its own with its publisher for virtual transports."""

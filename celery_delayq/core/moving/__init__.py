"""Moving due messages out of the store: the mover loop, its batches sized by time, the
hand-over to a broker elsewhere, and the back-off between attempts at an unreachable server."""

"""The store's health: its Redis's settings, the movers' heartbeats, one snapshot of the
backlog, where a client points, and doctor's consistency scan of the store's own keys."""

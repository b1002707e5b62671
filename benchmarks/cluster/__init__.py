"""``python -m benchmarks.cluster``: the delayed store on a Redis Cluster against a single
Redis, side by side in one run (scheduling rate, drain rate, memory, CPU per node)."""

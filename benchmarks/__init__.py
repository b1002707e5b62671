"""Side-by-side benchmarks: vanilla Celery on Redis versus celery-delayq.

Run from the repository root::

    python -m benchmarks            # full run, writes benchmarks/RESULTS.md and plots/*.png
    python -m benchmarks --quick    # CI smoke run with small sizes (< 60 s)

Every scenario with a vanilla counterpart runs twice in the same session, once per
transport, against one private ``redis-server`` and real ``celery worker``
subprocesses, so the two numbers in a row differ only in the transport. The store's
own limits (move rate, longest script call, scale-out) are measured for
celery-delayq alone. Plots need matplotlib (optional).
"""

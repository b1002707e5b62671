"""Side-by-side benchmarks: vanilla Celery on Redis versus celery-delayq.

Run from the repository root::

    python -m benchmarks            # full run, writes benchmarks/RESULTS.md
    python -m benchmarks --quick    # CI smoke run with small sizes

Every scenario runs twice in the same session, once per transport, against one
private ``redis-server`` and real ``celery worker`` subprocesses, so the two numbers
in a row differ only in the transport.
"""

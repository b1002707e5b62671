"""What celery-delayq adds to a Celery worker: the mover bootstep, due timers, the
delayed listing of ``inspect scheduled``, metrics, and the ``worker_init`` hook that
adds them (hooks.py)."""

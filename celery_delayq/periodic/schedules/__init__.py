"""Schedule kinds beyond Celery's, and an entry's bounds on any schedule.

- ``clocked``: once, at one instant (django-celery-beat's ``ClockedSchedule``);
- ``rrules``: RFC 5545 recurrence rules (``dateutil.rrule``), kept as an
  ``rrule_schedule``; ``rule_times`` says when one fires, fast;
- ``window``: ``start_time``, ``expires`` and ``one_off`` around any schedule.
"""

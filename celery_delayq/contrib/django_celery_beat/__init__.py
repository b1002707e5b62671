"""``CELERY_BEAT_SCHEDULER = "celery_delayq.contrib.django_celery_beat:Scheduler"``: beat
with django-celery-beat's periodic tasks, edited in the Django admin, kept in the delayed
store, so any number of beats run each occurrence once.

The rows become the store's ``django`` entries (rows.py, sync.py) whenever django-celery-beat
says they changed; the runs workers record are copied back onto them (runs.py); the
scheduler is celery-delayq's own (scheduler.py).
"""

from .scheduler import Scheduler

__all__ = ["Scheduler"]

"""A small Django project on celery-delayq: ``CELERY_``-namespaced settings, a view that
schedules a countdown task once its transaction commits, periodic tasks edited in the
admin and run once by any number of beats (``celery_delayq.contrib.django_celery_beat``),
and the dashboard behind Django's login (``celery_delayq.contrib.django``).

Importing the package loads the Celery app, so ``@shared_task`` tasks bind to it.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]

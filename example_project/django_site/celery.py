"""The Celery app, configured from Django's settings: every ``CELERY_*`` setting there is
a Celery setting (``CELERY_DELAYQ_MOVE_AHEAD`` is ``delayq_move_ahead``).

Run a worker with ``celery -A example_project.django_site worker -l info`` and beat with
``celery -A example_project.django_site beat -l info`` (the scheduler is in settings).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.django_site.settings")

app = Celery("django_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

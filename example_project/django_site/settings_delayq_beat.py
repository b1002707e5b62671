"""The example site with celery-delayq's beat scheduler instead of django-celery-beat's:
start the worker and beat with
``DJANGO_SETTINGS_MODULE=example_project.django_site.settings_delayq_beat``."""

from .settings import *  # noqa: F403

# celery-delayq's scheduler: the entries live in the delayed store, any number of beats
# may run, and each occurrence runs once.
CELERY_BEAT_SCHEDULER = "celery_delayq.beat:Scheduler"
CELERY_BEAT_SCHEDULE = {
    "confirm-overdue-orders": {
        "task": "example_project.django_site.shop.tasks.confirm_overdue_orders",
        "schedule": 60.0,
    },
}
# Keep the workers' movers on (the default): they deliver countdown tasks, and the
# occurrences beat wrote ahead, while every beat is down.
CELERY_DELAYQ_WORKER_MOVER = True

"""Django settings of the example site; the Celery ones are at the end, in the ``CELERY_``
namespace that ``celery.py`` reads.

``REDIS_URL`` and ``DJANGO_SITE_DB`` (the SQLite file) come from the environment, so the
tests can point the site at their own servers.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

# Development values: set DJANGO_SECRET_KEY and DEBUG=False in production.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-insecure-example-site-only")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "example_project.django_site.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.django_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_SITE_DB", str(BASE_DIR / "db.sqlite3")),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/admin/login/"
STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "UTC"

# Celery: the delayq transport on a Redis broker.
CELERY_BROKER_URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
CELERY_BROKER_TRANSPORT = "celery_delayq.transport:Transport"
# Leases of running tasks are renewed, so 60 s is enough however long a task runs.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 60}
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_IGNORE_RESULT = True

# celery-delayq: each worker runs a mover (the default) that moves due tasks to their
# queue; the keys of the delayed store start with this prefix.
CELERY_DELAYQ_WORKER_MOVER = True
CELERY_DELAYQ_KEY_PREFIX = "shop-delayq"

# Periodic tasks: edited in the admin (django-celery-beat's models) and kept in the
# delayed store by celery-delayq's scheduler, so any number of beats run each occurrence
# once. The workers' movers deliver them, and countdown tasks, while every beat is down.
CELERY_BEAT_SCHEDULER = "celery_delayq.contrib.django_celery_beat:Scheduler"
# Entries defined in code sit beside the admin's (they are not shown in its list).
CELERY_BEAT_SCHEDULE = {
    "confirm-overdue-orders": {
        "task": "example_project.django_site.shop.tasks.confirm_overdue_orders",
        "schedule": 60.0,
    },
}

"""The example site's settings, with the Django tests' recording task imported by every
worker and beat (a beat runs only the tasks it knows)."""

from example_project.django_site.settings import *  # noqa: F403

CELERY_IMPORTS = ["tests.django.site_tasks"]

"""Django settings of the sides of ``python -m benchmarks.periodic_beats --django``: the
example site's (example_project/django_site), with the scenario's recording task imported
by every worker and beat, and no entry in ``CELERY_BEAT_SCHEDULE`` (only the rows run).

``PERIODIC_DJANGO_TRANSPORT=kombu`` puts the side on kombu's own Redis transport, as a
site on django-celery-beat's ``DatabaseScheduler`` runs; the scheduler is beat's ``-S``.
"""

import os

from example_project.django_site.settings import *  # noqa: F403

CELERY_IMPORTS = ["benchmarks.periodic_django_admin"]
CELERY_BEAT_SCHEDULE = {}
if os.environ.get("PERIODIC_DJANGO_TRANSPORT") == "kombu":
    CELERY_BROKER_TRANSPORT = None  # type: ignore[assignment]  # the broker URL's: kombu's

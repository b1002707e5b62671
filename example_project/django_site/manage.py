#!/usr/bin/env python
"""Django's command line for the example site; run it from the repository's root:
``python example_project/django_site/manage.py migrate``."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The repository's root, not this directory: here ``celery`` would be ./celery.py.
    sys.path[0] = str(Path(__file__).resolve().parents[2])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.django_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)

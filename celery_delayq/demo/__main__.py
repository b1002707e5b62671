"""``python -m celery_delayq.demo [--pool solo]``: the demo with the package's own app."""

import sys

from .runner import main

sys.exit(main())

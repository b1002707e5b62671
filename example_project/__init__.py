"""A small Celery project using celery-delayq, plus a demo (``python -m example_project.demo``)."""

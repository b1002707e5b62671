"""Periodic entries in and out of the store, in other schedulers' forms.

``export``: the store's entries as a ``beat_schedule`` module (beat_module.py), a
django-celery-beat fixture (django_fixture.py), redbeat's keys (redbeat_keys.py) or our
own lossless JSON (own_json.py). ``import``: those sources read into entries
(sources.py), compared with the store and written through ``periodic.upsert``
(plan.py); an entry a source holds that cannot be kept here is skipped, with why.
``clear`` (clear_all.py) removes every entry, for a switch to another scheduler.
"""

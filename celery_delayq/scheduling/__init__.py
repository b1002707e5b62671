"""What an app calls to schedule delayed tasks beyond ``apply_async``: many at once
(bulk.py's ``schedule_many``) and keyed (debounce.py's ``schedule_keyed``, ``debounce``)."""

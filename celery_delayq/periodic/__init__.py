"""Periodic entries: when each occurrence falls (``cron_times``), in the entry's own time zone."""

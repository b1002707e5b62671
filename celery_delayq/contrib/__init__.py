"""Integrations with web frameworks around the dashboard (an outer layer, like ``web``)."""

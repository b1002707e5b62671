"""Format stability: the delayed stores as an earlier revision wrote them
(store-fixture.json, written by make_fixtures.py) must still be delivered, each message
exactly once, by the code of today (test_format_stability.py)."""

"""Take the dashboard guide's screenshots of the web dashboard (docs/_static/screenshots/).

    python tools/web_screenshots.py [--output DIR]

Starts a private redis-server, schedules a few hundred tasks of a made-up project
(reminders, invoices, debounced re-indexing), runs a mover over a minute's worth of
tasks falling due so the moves charts have something to show, serves the dashboard and
photographs its pages with Debian's chromium through Playwright.
"""

from __future__ import annotations

import argparse
import random
import threading
from pathlib import Path
from typing import Any

from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import mover_thread
from celery_delayq.testing import (
    CHROMIUM_FLAGS,
    RedisServer,
    chromium_binary,
    free_port,
    wait_until,
)
from celery_delayq.web.app import create_app

ROOT = Path(__file__).resolve().parent.parent


def noop(*args: Any, **kwargs: Any) -> None:
    """The tasks' body: only their messages show."""


def schedule(app: Celery) -> None:
    reminder = app.task(name="proj.emails.send_reminder")(noop)
    charge = app.task(name="proj.billing.charge")(noop)
    reindex = app.task(name="proj.search.reindex_user")(noop)
    rng = random.Random(1)
    for _ in range(400):
        user = f"user-{rng.randint(1, 9999)}@example.com"
        countdown = rng.expovariate(1 / 1200)
        reminder.apply_async((user,), {"template": "trial-ending"}, countdown=countdown)
    for _ in range(60):
        amount = {"amount_cents": rng.randint(500, 9000)}
        charge.apply_async(
            (rng.randint(100, 999),), amount, countdown=rng.uniform(60, 3600), queue="billing"
        )
    for user in (42, 43, 44):
        celery_delayq.debounce(reindex, (user,), key=f"user:{user}", countdown=900)
    for n in range(300):  # falls due over the next 12 s, for the moves charts
        reminder.apply_async((f"soon-{n}",), countdown=0.5 + n / 25)


def main() -> None:
    from playwright.sync_api import sync_playwright
    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "_static" / "screenshots")
    options = parser.parse_args()
    options.output.mkdir(parents=True, exist_ok=True)
    with RedisServer() as server:
        app = Celery("proj", broker=server.url, set_as_current=False)
        app.conf.broker_transport = "celery_delayq.transport:Transport"
        schedule(app)
        web = create_app(app, sample_every=2.0)
        sampler = web.extensions["celery_delayq"].sampler
        sampler.start()
        mover = mover_thread(app, "screenshots")
        mover.start()
        port = free_port()
        http = make_server("127.0.0.1", port, web, threaded=True)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        wait_until(lambda: len(sampler.intervals()) >= 7, timeout=60, what="charts")
        browser_path = chromium_binary() or "chromium"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for name, path in [
                ("overview", "/?refresh=0"),
                ("scheduled", "/scheduled?task=proj.billing.charge&before=30m"),
            ]:
                page.goto(f"http://127.0.0.1:{port}{path}")
                page.screenshot(path=options.output / f"{name}.png", full_page=True)
            browser.close()
        mover.stop()
        http.shutdown()
    print(f"screenshots in {options.output}")


if __name__ == "__main__":
    main()

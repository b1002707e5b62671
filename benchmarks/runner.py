"""Run the selected scenarios, each on both sides, against one private Redis."""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from pathlib import Path

from celery_delayq.testing import RedisServer

from .harness import Bench, log
from .profiles import Profile
from .report import ScenarioResult
from .scenarios import SCENARIO_KEYS, Scenario, build, draw, sides_of


def run_scenario(bench: Bench, scenario: Scenario, plot_dir: Path | None) -> ScenarioResult:
    """Measure vanilla, then delayq, with identical sizes and transport options; then plot.

    A scenario with ``rounds`` is measured that many times, the sides alternating round
    by round (a busy spell of a shared machine then lands on both), and its ``best``
    picks each side's values from its rounds.
    """
    started = time.monotonic()
    rounds: dict[str, list[dict[str, float | None]]] = {"vanilla": [], "delayq": []}
    for number in range(1, getattr(scenario, "rounds", 1) + 1):
        for side in sides_of(scenario):
            log(f"{scenario.title} -- {side}" + (f", round {number}" if number > 1 else ""))
            options_for = getattr(scenario, "transport_options_for", None)
            options = options_for(side) if options_for else scenario.transport_options
            with bench.run(scenario.key, side, options) as run:
                values = scenario.measure(run)
            rounds[side].append(values)
            shown = ", ".join(f"{k}={v:.4g}" for k, v in values.items() if v is not None)
            log(f"  {side}: {shown}")
    best = getattr(scenario, "best", lambda measured: measured[-1])
    measured = {side: best(values) if values else {} for side, values in rounds.items()}
    result = ScenarioResult.from_measurements(
        scenario.title,
        scenario.specs,
        measured["vanilla"],
        measured["delayq"],
        seconds=time.monotonic() - started,
    )
    if plot_dir is not None:
        result.plots = draw(scenario, plot_dir)
    return result


def run_all(
    profile: Profile, keys: tuple[str, ...] = SCENARIO_KEYS, plot_dir: Path | None = None
) -> list[ScenarioResult]:
    """Every selected scenario; a crash is recorded in its result and the next one runs.

    KeyboardInterrupt and SystemExit are not caught: they unwind through every
    ``finally``, which stops the workers and the Redis server.
    """
    log_dir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))
    results: list[ScenarioResult] = []
    try:
        with RedisServer("--maxmemory-policy", "noeviction") as server:
            log(f"redis-server on port {server.port}; worker logs in {log_dir}")
            bench = Bench(server.url, server.client(), log_dir)
            for scenario in build(profile, keys):
                try:
                    results.append(run_scenario(bench, scenario, plot_dir))
                except Exception:
                    error = traceback.format_exc()
                    log(f"{scenario.title} CRASHED:\n{error}")
                    results.append(ScenarioResult(scenario.title, error=error))
    finally:
        if all(result.error is None for result in results):
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            log(f"worker logs kept in {log_dir}")
    return results

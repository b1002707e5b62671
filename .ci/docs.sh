#!/usr/bin/env bash
# The documentation site: install the docs extra into the current (CI) virtualenv, build
# docs/ offline with warnings as errors and nitpicky, check every internal link of the
# built HTML (external ones are not checked), then open the index and two guides in
# headless Chromium (tests/docs/test_site_browser.py). DOCS_OUT: where to build
# (default: a temporary directory, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${DOCS_OUT:-}"
if [[ -z $out ]]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi

# Installed only when missing: CI's setup installs the docs extra before the steps that run
# side by side, so that no pip reinstalls the package under another step's feet.
if ! python -c 'import celery_delayq, sphinx, myst_parser, furo, sphinx_click, pytest' 2>/dev/null; then
    python -m pip install --quiet -e ".[docs,test]"
fi
python -m sphinx -W -n --keep-going -q -b html docs "$out/html"
python -m tests.docs.check_links "$out/html"
DELAYQ_DOCS_HTML="$out/html" DELAYQ_REQUIRE_BROWSER=1 \
    python -m pytest -q -p no:cacheprovider tests/docs/test_site_browser.py

"""Sphinx configuration of the celery-delayq documentation (MyST Markdown, furo theme).

The reference pages are generated from the code (docs/_ext/delayq_reference.py,
sphinx-click, autodoc), so a setting, command, metric or key cannot change without its
page. The build needs no network: no intersphinx, the theme ships its assets.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import celery_delayq  # noqa: E402

project = "celery-delayq"
author = "celery-delayq contributors"
copyright = "celery-delayq contributors"  # noqa: A001 - the name Sphinx reads
release = version = celery_delayq.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "delayq_reference",
    "delayq_promises",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"celery-delayq {release}"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

# Nitpicky (-n) without network: names from other projects cannot be resolved without
# their intersphinx inventories, so only this project's own references are checked.
nitpick_ignore_regex = [
    (r"py:.*", r"(celery|kombu|redis|click|flask|werkzeug|prometheus_client)(\..*)?"),
    (r"py:.*", r"(datetime|collections\.abc|typing|enum|dataclasses)\..*"),
    (r"py:class", r"(Celery|Signature|Task|AsyncResult|tzinfo|datetime|timedelta)"),
    (r"py:class", r"(Any|Iterable|Mapping|Sequence|Callable|Iterator)"),
    # Internal types in public signatures, not exported themselves.
    (r"py:class", r"(celery_delayq\.core\.store\.(state\.)?)?ReplicaWait"),
    (r"py:class", r"(celery_delayq\.core\.delay_keys\.)?KeyedOutcome"),
]

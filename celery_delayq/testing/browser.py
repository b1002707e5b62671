"""A headless chromium for the browser tests and ``tools/web_screenshots.py``."""

from __future__ import annotations

import shutil

#: Flags for a headless chromium in a container with no network beyond this machine (the
#: browser tests and tools/web_screenshots.py).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_binary() -> str | None:
    """Debian's chromium on PATH (Playwright's own browser downloads are not used)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")

"""PNG plots next to RESULTS.md, drawn with matplotlib's Agg backend (no display needed).

matplotlib is optional: without it the tables are still written and each scenario
logs that it drew nothing, so a CI smoke run does not need it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .harness import log

#: One colour per side, the same in every plot.
COLOURS = {"vanilla": "tab:orange", "delayq": "tab:blue"}
LABELS = {"vanilla": "vanilla Celery", "delayq": "celery-delayq"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        log("  matplotlib is not installed: no plot drawn (pip install matplotlib)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def lines(
    path: Path,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    hline: tuple[float, str] | None = None,
    marker: str | None = "o",
) -> Path | None:
    """One line with markers per series (keyed by side or any label); None without
    matplotlib. ``hline`` draws a dashed target line with its label; ``marker=None``:
    lines alone (hundreds of points)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker=marker, label=LABELS.get(name, name), color=COLOURS.get(name))
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle="--", linewidth=1, label=hline[1])
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("symlog", linthresh=1)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(plt, fig, path)


def cdf(
    path: Path,
    samples: Mapping[str, Sequence[float]],
    *,
    title: str,
    xlabel: str,
    vline: tuple[float, str] | None = None,
) -> Path | None:
    """Empirical CDF of each side's samples (x on a log scale when all are positive)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name, values in samples.items():
        ordered = sorted(values)
        if not ordered:
            continue
        fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step(
            ordered, fractions, where="post", label=LABELS.get(name, name), color=COLOURS.get(name)
        )
    if vline is not None:
        ax.axvline(vline[0], color="grey", linestyle="--", linewidth=1, label=vline[1])
    if all(v > 0 for values in samples.values() for v in values):
        ax.set_xscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel="fraction of tasks", ylim=(0, 1.01))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

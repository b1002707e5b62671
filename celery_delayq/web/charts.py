"""Charts drawn on the server as inline SVG: no JavaScript, nothing fetched, and every
label escaped like the rest of the page."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 170
LEFT, BOTTOM, TOP = 44, 22, 10
COLOURS = ("#2f6fdf", "#e0692e", "#2a9d6f", "#9b59b6")


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _frame(
    title: str, top_value: float, unit: str, labels: Sequence[str], body: str, width: int
) -> Markup:
    """Axes, the top value, about six x labels, and the drawn body."""
    plot_width = width - LEFT - 4
    step = max(1, len(labels) // (6 if width >= 600 else 4))
    ticks = "".join(
        f'<text x="{LEFT + (i + 0.5) * plot_width / len(labels):.1f}" y="{HEIGHT - 6}" '
        f'text-anchor="middle">{escape(label)}</text>'
        for i, label in enumerate(labels)
        if i % step == 0
    )
    return Markup(
        f'<svg class="chart" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>"
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{width - 4}" '
        f'y2="{HEIGHT - BOTTOM}"/>'
        f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{width - 4}" y2="{TOP}"/>'
        f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">{_number(top_value)}</text>'
        f'<text x="{LEFT - 6}" y="{HEIGHT - BOTTOM}" text-anchor="end">0</text>'
        f'<text x="{LEFT - 6}" y="{TOP + 16}" text-anchor="end" class="unit">'
        f"{escape(unit)}</text>{ticks}{body}</svg>"
    )


def bar_chart(
    values: Sequence[float],
    labels: Sequence[str],
    *,
    title: str,
    unit: str = "",
    width: int = WIDTH,
) -> Markup:
    """One bar per value; each bar's tooltip says its label and value. ``width``: of the
    drawing, in the page's pixels when shown at its natural size (text scales with it)."""
    top = max(values, default=0) or 1
    plot_width, plot_height = width - LEFT - 4, HEIGHT - BOTTOM - TOP
    slot = plot_width / max(1, len(values))
    bars = []
    for i, (value, label) in enumerate(zip(values, labels)):
        height = plot_height * value / top
        bars.append(
            f'<rect class="bar" x="{LEFT + i * slot + slot * 0.1:.1f}" '
            f'y="{HEIGHT - BOTTOM - height:.1f}" width="{slot * 0.8:.1f}" height="{height:.1f}">'
            f"<title>{escape(label)}: {_number(value)} {escape(unit)}</title></rect>"
        )
    return _frame(title, top, unit, labels, "".join(bars), width)


def line_chart(
    series: dict[str, Sequence[float | None]],
    labels: Sequence[str],
    *,
    title: str,
    unit: str = "",
    width: int = WIDTH,
) -> Markup:
    """One line per named series (None: no value there), with a legend."""
    known = [v for values in series.values() for v in values if v is not None]
    top = max(known, default=0) or 1
    plot_width, plot_height = width - LEFT - 4, HEIGHT - BOTTOM - TOP
    slot = plot_width / max(1, len(labels))
    body = []
    for n, (name, values) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        points = " ".join(
            f"{LEFT + (i + 0.5) * slot:.1f},{HEIGHT - BOTTOM - plot_height * v / top:.1f}"
            for i, v in enumerate(values)
            if v is not None
        )
        body.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
            f"<title>{escape(name)}</title></polyline>"
            f'<text x="{width - 8}" y="{TOP + 12 + 14 * n}" text-anchor="end" '
            f'fill="{colour}">{escape(name)}</text>'
        )
    return _frame(title, top, unit, labels, "".join(body), width)

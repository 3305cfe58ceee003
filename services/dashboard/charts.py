"""Line charts drawn as inline SVG on the server: no script, no library, nothing fetched."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from markupsafe import Markup, escape

#: Colours of the series, in order.
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea")


def _label(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def line_chart(times_ms: Sequence[int], series: dict[str, Sequence[float]], title: str = "",
               width: int = 640, height: int = 180) -> Markup:
    """An SVG line chart of ``series`` (name -> values, one per time) over ``times_ms`` (epoch ms)."""
    pad_l, pad_r, pad_t, pad_b = 48, 12, 22, 22
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'aria-label="{escape(title)}">', f'<text x="{pad_l}" y="14" class="chart-title">{escape(title)}</text>']
    n = len(times_ms)
    if n < 2:
        parts.append(f'<text x="{pad_l}" y="{pad_t + h / 2:.0f}" class="chart-empty">collecting: the chart fills in '
                     f'as samples come</text></svg>')
        return Markup("".join(parts))
    top = max([max(v, default=0.0) for v in series.values()] + [1.0])
    t0, t1 = times_ms[0], times_ms[-1]
    span = max(1, t1 - t0)
    for frac in (0.0, 0.5, 1.0):
        y = pad_t + h - frac * h
        parts.append(f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        label = _label(top * frac)
        parts.append(f'<text x="{pad_l - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">{label}</text>')
    for t, anchor in ((t0, "start"), (t1, "end")):
        x = pad_l + (t - t0) / span * w
        stamp = datetime.datetime.fromtimestamp(t / 1000, datetime.UTC).strftime("%H:%M:%S")
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" class="axis" text-anchor="{anchor}">{stamp}</text>')
    for i, (name, values) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{pad_l + (t - t0) / span * w:.1f},{pad_t + h - (v / top) * h:.1f}"
                          for t, v in zip(times_ms, values, strict=False))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        parts.append(f'<text x="{pad_l + w - 110 * (len(series) - i)}" y="14" class="legend" '
                     f'fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))

"""Small inline SVG charts for the operator pages: bars and lines over a series of points, no script, no build step.

Pure functions of plain data: values in, an ``<svg>`` string out (every label escaped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streams.console.layout import esc, humanize_seconds

WIDTH, HEIGHT, PAD_LEFT, PAD_TOP, PAD_BOTTOM = 300, 96, 44, 16, 18


@dataclass(frozen=True)
class Series:
    """One series of a chart: ``kind`` is ``bar`` or ``line``; None values leave a gap."""

    label: str
    values: Sequence[float | None]
    kind: str = "bar"
    color: str = "#4b7bd1"


def scale_max(values: Sequence[float | None], floor: float = 1.0) -> float:
    """The top of the y axis: the largest value, at least ``floor`` (an empty chart stays
    flat instead of magnifying nothing)."""
    present = [v for v in values if v is not None]
    return max([floor, *present])


def svg(
    title: str,
    series: Sequence[Series],
    *,
    seconds: bool = False,
    x_labels: tuple[str, str] = ("-60 min", "now"),
    data_k: str = "",
) -> str:
    """A chart of ``series`` sharing one y axis (``seconds``: its top label humanized)."""
    n = max((len(s.values) for s in series), default=0)
    # Waits are often milliseconds: a 100 ms floor keeps them visible, counts start at 1.
    top = scale_max([v for s in series for v in s.values], 0.1 if seconds else 1.0)
    plot_w, plot_h = WIDTH - PAD_LEFT - 4, HEIGHT - PAD_TOP - PAD_BOTTOM
    step = plot_w / n if n else plot_w

    def y(value: float) -> float:
        return PAD_TOP + plot_h - (value / top) * plot_h

    parts: list[str] = []
    for s in series:
        if s.kind == "bar":
            for i, v in enumerate(s.values):
                if v:
                    x = PAD_LEFT + i * step
                    parts.append(
                        f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{max(step - 1, 1):.1f}" '
                        f'height="{PAD_TOP + plot_h - y(v):.1f}" fill="{esc(s.color)}"/>'
                    )
        else:
            for run in _runs(s.values):
                if len(run) == 1:  # a lone point: a dot, a line of one point shows nothing
                    i, v = run[0]
                    parts.append(
                        f'<circle cx="{PAD_LEFT + (i + 0.5) * step:.1f}" cy="{y(v):.1f}" r="2.5" '
                        f'fill="{esc(s.color)}"/>'
                    )
                    continue
                points = " ".join(f"{PAD_LEFT + (i + 0.5) * step:.1f},{y(v):.1f}" for i, v in run)
                parts.append(
                    f'<polyline points="{points}" fill="none" stroke="{esc(s.color)}" '
                    'stroke-width="1.8" stroke-linejoin="round"/>'
                )
    top_label = humanize_seconds(top) if seconds else _number(top)
    legend = "".join(
        f'<tspan fill="{esc(s.color)}">■</tspan> {esc(s.label)}  ' for s in series
    ).strip()
    base = PAD_TOP + plot_h
    attr = f' data-k="{esc(data_k)}"' if data_k else ""
    return (
        f'<svg class="chart" role="img" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}"{attr}><title>{esc(title)}</title>'
        f'<text x="{PAD_LEFT}" y="11" class="legend">{legend}</text>'
        f'<line x1="{PAD_LEFT}" y1="{base}" x2="{WIDTH - 4}" y2="{base}" stroke="#c9ced4"/>'
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{WIDTH - 4}" y2="{PAD_TOP}" '
        'stroke="#eceef1" stroke-dasharray="3 3"/>'
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 4}" text-anchor="end" class="axis">'
        f"{esc(top_label)}</text>"
        f'<text x="{PAD_LEFT - 4}" y="{base}" text-anchor="end" class="axis">0</text>'
        f'<text x="{PAD_LEFT}" y="{HEIGHT - 4}" class="axis">{esc(x_labels[0])}</text>'
        f'<text x="{WIDTH - 4}" y="{HEIGHT - 4}" text-anchor="end" class="axis">'
        f"{esc(x_labels[1])}</text>" + "".join(parts) + "</svg>"
    )


def _runs(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """The stretches of consecutive present values (a line breaks where a value is None)."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for i, v in enumerate(values):
        if v is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((i, v))
    if current:
        runs.append(current)
    return runs


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"

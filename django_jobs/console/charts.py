"""The dashboard's chart of outcomes over time: SVG made on the server, with no script and
no font or file from outside the app (the page's own font is inherited). Its instants read as
every page's do (``django_jobs.words.instant``: ``2026-03-01 12:00:00 UTC``)."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import words
from ..services.dashboard import CHART_STATES, Bucket

WIDTH, HEIGHT, AXIS = 960, 180, 40  # the plot's size, and the room left of it for the scale


def outcome_chart(buckets: Sequence[Bucket]) -> SafeString:
    """Stacked bars, one per bucket, a colour per state (``CHART_STATES``); each bar's
    ``<title>`` says its span and count (``2026-03-01 11:30:00 UTC to
    2026-03-01 12:00:00 UTC: 3 completed``), the axis the first bucket's start and the last
    one's end. Every text is escaped: a state name is data."""
    peak = max((b.total for b in buckets), default=0) or 1
    step = (WIDTH - AXIS) / max(len(buckets), 1)
    bars = []
    for i, bucket in enumerate(buckets):
        x = AXIS + i * step
        top = float(HEIGHT)
        for state, colour in CHART_STATES:
            count = bucket.counts.get(state, 0)
            if not count:
                continue
            height = (HEIGHT - 10) * count / peak
            top -= height
            bars.append(
                format_html(
                    '<rect class="jobs-bar jobs-{}" x="{}" y="{}" width="{}" '
                    'height="{}" fill="{}"><title>{} to {}: {} {}</title></rect>',
                    state,
                    f"{x + 1:.1f}",
                    f"{top:.1f}",
                    f"{max(step - 2, 1):.1f}",
                    f"{height:.1f}",
                    colour,
                    words.instant(bucket.start),
                    words.instant(bucket.end),
                    count,
                    state,
                )
            )
    first = words.instant(buckets[0].start) if buckets else ""
    last = words.instant(buckets[-1].end) if buckets else ""
    legend = format_html_join(
        "",
        '<span class="jobs-legend"><svg width="10" height="10" aria-hidden="true">'
        '<rect width="10" height="10" fill="{}"/></svg> {}</span> ',
        ((colour, state) for state, colour in CHART_STATES),
    )
    return format_html(
        '<svg class="jobs-chart" role="img" aria-label="occurrences by outcome over time" '
        'viewBox="0 0 {w} {h2}" width="100%" preserveAspectRatio="none" '
        'xmlns="http://www.w3.org/2000/svg">'
        '<line x1="{a}" y1="{h}" x2="{w}" y2="{h}" stroke="#999"/>'
        '<text x="0" y="12" font-size="11" fill="currentColor">{peak}</text>'
        '<text x="0" y="{h}" font-size="11" fill="currentColor">0</text>'
        "{bars}"
        '<text x="{a}" y="{h3}" font-size="11" fill="currentColor">{first}</text>'
        '<text x="{w}" y="{h3}" font-size="11" text-anchor="end" fill="currentColor">'
        "{last}</text></svg><div>{legend}</div>",
        w=WIDTH,
        h=HEIGHT,
        h2=HEIGHT + 16,
        h3=HEIGHT + 14,
        a=AXIS,
        peak=peak,
        bars=SafeString("".join(bars)),
        first=first,
        last=last,
        legend=legend,
    )

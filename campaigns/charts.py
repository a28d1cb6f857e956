"""Server-side SVG charts for the operator's console (nothing loaded from the internet, no script)."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

WIDTH, HEIGHT, PAD = 640, 220, 36


def burndown_svg(*, total: int, start: datetime, bucket_seconds: int, counts: list[int], now_remaining: int | None
                 ) -> SafeString:
    """Draw remaining stock over time since the start: a line falling as claims come in."""
    left = total
    points = [(0, total)]
    for i, count in enumerate(counts):
        left -= count
        points.append((i + 1, left))
    scale_x = (WIDTH - 2 * PAD) / max(len(counts), 1)
    scale_y = (HEIGHT - 2 * PAD) / max(total, 1)
    coords = " ".join(f"{PAD + x * scale_x:.1f},{HEIGHT - PAD - max(y, 0) * scale_y:.1f}" for x, y in points)
    end = start + timedelta(seconds=bucket_seconds * len(counts))
    fmt = "%m-%d %H:%M:%S"
    label_start = timezone.localtime(start).strftime(fmt)
    label_end = timezone.localtime(end).strftime(fmt)
    claimed = sum(counts)
    caption = _("%(claims)s claims persisted; %(remaining)s left in Redis") % {
        "claims": claimed, "remaining": now_remaining if now_remaining is not None else "?"}
    return format_html(
        '<svg id="burndown" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'role="img" aria-label="{label}" data-claims="{claimed}">'
        '<rect x="0" y="0" width="{w}" height="{h}" fill="#fff" stroke="#ddd"/>'
        '<line x1="{p}" y1="{b}" x2="{r}" y2="{b}" stroke="#999"/>'
        '<line x1="{p}" y1="{p}" x2="{p}" y2="{b}" stroke="#999"/>'
        '<text x="{p}" y="{t}" font-size="11" fill="#333">{total}</text>'
        '<text x="{p}" y="{lb}" font-size="11" fill="#333">{ls}</text>'
        '<text x="{r}" y="{lb}" font-size="11" fill="#333" text-anchor="end">{le}</text>'
        '<polyline fill="none" stroke="#417690" stroke-width="2" points="{coords}"/>'
        '<text x="{mid}" y="16" font-size="12" fill="#333" text-anchor="middle">{caption}</text>'
        "</svg>",
        w=WIDTH, h=HEIGHT, p=PAD, b=HEIGHT - PAD, r=WIDTH - PAD, t=PAD - 4, lb=HEIGHT - PAD + 16,
        total=total, ls=label_start, le=label_end, coords=mark_safe(coords), mid=WIDTH // 2, caption=caption,
        claimed=claimed, label=_("Burn-down: remaining stock since the start"),
    )


def daily_bars_svg(*, days: list[str], series: dict[str, list[int]]) -> SafeString:
    """Draw a few figures a day as grouped bars (a campaign's report: issued, redeemed, released ...)."""
    colours = ["#417690", "#79aec8", "#e1a035", "#ba2121", "#5b8f29", "#999999"]
    peak = max([1, *(v for values in series.values() for v in values)])
    slot = (WIDTH - 2 * PAD) / max(len(days), 1)
    bar = max(slot * 0.8 / max(len(series), 1), 1.0)
    scale = (HEIGHT - 2 * PAD - 14) / peak
    shapes = []
    for s, (name, values) in enumerate(series.items()):
        for i, value in enumerate(values):
            height = value * scale
            x = PAD + i * slot + slot * 0.1 + s * bar
            shapes.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{} {}: {}</title>'
                                      "</rect>", f"{x:.1f}", f"{HEIGHT - PAD - height:.1f}", f"{bar:.1f}",
                                      f"{height:.1f}", colours[s % len(colours)], days[i], name, value))
        shapes.append(format_html('<text x="{}" y="14" font-size="11" fill="{}">{}</text>', PAD + s * 90,
                                  colours[s % len(colours)], name))
    labels = [format_html('<text x="{}" y="{}" font-size="10" fill="#333" text-anchor="middle">{}</text>',
                          f"{PAD + (i + 0.5) * slot:.1f}", HEIGHT - PAD + 14, day[5:]) for i, day in enumerate(days)]
    return format_html(
        '<svg id="report-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'role="img" aria-label="{label}">'
        '<rect x="0" y="0" width="{w}" height="{h}" fill="#fff" stroke="#ddd"/>'
        '<line x1="{p}" y1="{b}" x2="{r}" y2="{b}" stroke="#999"/>'
        '<text x="{p}" y="{t}" font-size="11" fill="#333" text-anchor="end">{peak}</text>'
        "{shapes}{labels}</svg>",
        w=WIDTH, h=HEIGHT, p=PAD, b=HEIGHT - PAD, r=WIDTH - PAD, t=PAD + 10, peak=peak,
        shapes=mark_safe("".join(shapes)), labels=mark_safe("".join(labels)), label=_("Figures by day"),
    )

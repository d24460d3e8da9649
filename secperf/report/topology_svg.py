"""The testbed graph as an SVG drawing for the HTML report: hosts by zone and role,
links with their rates, and the mechanisms each host carries in some variant.

Hosts are laid out in columns by their hop distance from the first client host,
so the path from clients to servers reads left to right; a switch is drawn as a
small box, a forwarding host (DUT, gateway) with a heavier border.
"""

from __future__ import annotations

import textwrap
from collections import deque
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

BOX_W, BOX_H, COL_GAP, ROW_GAP, MARGIN = 150, 58, 90, 26, 20
LINE_CHARS, LINE_H = 26, 12  # a mechanism line's width in characters, its height


def fmt_link_rate(bps: int | None) -> str:
    if bps is None:
        return ""
    for unit, factor in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= factor:
            return f"{bps / factor:g} {unit}"
    return f"{bps} bit/s"


def _layers(hosts: Sequence[Mapping[str, Any]], links: Sequence[Mapping[str, Any]]) -> list[str]:
    """Host names ordered by hop distance from the first client (unreached ones last)."""
    names = [str(h["name"]) for h in hosts]
    adj: dict[str, list[str]] = {n: [] for n in names}
    for lk in links:
        a, b = (str(e) for e in lk["ends"])
        adj[a].append(b)
        adj[b].append(a)
    start = next((str(h["name"]) for h in hosts if h.get("role") == "client"), names[0])
    dist = {start: 0}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for nxt in adj[here]:
            if nxt not in dist:
                dist[nxt] = dist[here] + 1
                queue.append(nxt)
    far = max(dist.values(), default=0) + 1
    return sorted(names, key=lambda n: (dist.get(n, far), names.index(n)))


def render_topology_svg(
    topology: Mapping[str, Any], placements: Mapping[str, Sequence[Mapping[str, Any]]]
) -> str:
    """One <svg> element; `placements` is run.json's variant -> [{kind, hosts}]."""
    hosts: list[Mapping[str, Any]] = list(topology.get("hosts") or [])
    links: list[Mapping[str, Any]] = list(topology.get("links") or [])
    if not hosts:
        return ""
    # per host, each kind once with the variants that put it there, wrapped (never cut)
    kinds: dict[str, dict[str, list[str]]] = {}
    for variant, mechs in placements.items():
        for m in mechs:
            for h in m.get("hosts") or []:
                kinds.setdefault(str(h), {}).setdefault(str(m.get("kind")), []).append(variant)
    carried = {
        host: [
            line
            for kind, variants in by_kind.items()
            for line in textwrap.wrap(f"{kind} ({', '.join(variants)})", LINE_CHARS)
        ]
        for host, by_kind in kinds.items()
    }
    box_h = BOX_H + LINE_H * max(0, max((len(v) for v in carried.values()), default=0) - 1)
    by_name = {str(h["name"]): h for h in hosts}
    order = _layers(hosts, links)
    # Column = hop distance; recompute it from the order's grouping.
    col: dict[str, int] = {}
    adj: dict[str, set[str]] = {n: set() for n in by_name}
    for lk in links:
        a, b = (str(e) for e in lk["ends"])
        adj[a].add(b)
        adj[b].add(a)
    for name in order:
        before = [col[p] for p in adj[name] if p in col]
        col[name] = (min(before) + 1) if before else (max(col.values(), default=-1) + 1)
    rows: dict[int, int] = {}
    pos: dict[str, tuple[float, float]] = {}
    for name in order:
        c = col[name]
        r = rows.get(c, 0)
        rows[c] = r + 1
        pos[name] = (MARGIN + c * (BOX_W + COL_GAP), MARGIN + r * (box_h + ROW_GAP))
    width = MARGIN * 2 + (max(col.values()) + 1) * (BOX_W + COL_GAP) - COL_GAP
    height = MARGIN * 2 + max(rows.values()) * (box_h + ROW_GAP) - ROW_GAP + 16
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="topology" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="testbed graph">'
    ]
    for lk in links:
        a, b = (str(e) for e in lk["ends"])
        (xa, ya), (xb, yb) = pos[a], pos[b]
        x1, y1, x2, y2 = xa + BOX_W / 2, ya + box_h / 2, xb + BOX_W / 2, yb + box_h / 2
        out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555"/>')
        label = fmt_link_rate(lk.get("rate_bps"))
        if lk.get("offloads") == "off":
            label = f"{label} offloads off".strip()
        if label:
            out.append(
                f'<text x="{(x1 + x2) / 2}" y="{(y1 + y2) / 2 - 4}" font-size="11" '
                f'text-anchor="middle" fill="#a33">{escape(label)}</text>'
            )
    for name in order:
        h = by_name[name]
        x, y = pos[name]
        role, zone = str(h.get("role")), h.get("zone")
        small = role == "switch"
        stroke = 3 if h.get("forwarding") else 1
        fill = "#eef3fb" if zone == "inside" else "#fbefee" if zone == "outside" else "#f4f4f4"
        hh = BOX_H / 2 if small else box_h
        out.append(
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{hh}" rx="6" fill="{fill}" '
            f'stroke="#333" stroke-width="{stroke}"/>'
        )
        sub = role + (f" · {zone}" if zone else "")
        out.append(
            f'<text x="{x + 8}" y="{y + 16}" font-size="13" font-weight="bold">'
            f"{escape(name)}</text>"
        )
        if not small:
            out.append(f'<text x="{x + 8}" y="{y + 31}" font-size="11">{escape(sub)}</text>')
        for i, line in enumerate(carried.get(name, [])):
            out.append(
                f'<text x="{x + 8}" y="{y + 46 + i * LINE_H}" font-size="10" fill="#0a5">'
                f"{escape(line)}</text>"
            )
    out.append("</svg>")
    return "".join(out)

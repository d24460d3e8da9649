"""The user's own traffic: a flow list (CSV), a conntrack dump, a pcap.

Each reader returns flows in the user's addresses (the address map places them) with
no expected verdict: the run measures what the rule set does with them. A bad line
is a ScenarioError naming FILE:LINE and the fix.

- CSV: `protocol,src,dst,dport,weight,request,response[,ingress,egress,name]`, sizes
  with units (`1KiB`), weights positive.
- conntrack: `conntrack -L -o extended` lines; one flow per (protocol, src, dst, dport)
  of the original direction, its weight the number of such lines.
- pcap (dpkt): TCP connections (a SYN seen) and UDP exchanges by 5-tuple, in the
  order they start; request/response are the payload bytes each way; flows of the
  same (protocol, dst, dport) share one weight, their count.
"""

from __future__ import annotations

import csv
import ipaddress
import math
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dpkt

from secperf.errors import ScenarioError
from secperf.rulesets.model import Flow, Protocol
from secperf.schema.units import parse_size

CSV_COLUMNS = ("protocol", "src", "dst", "dport", "weight", "request", "response")
CSV_OPTIONAL = ("ingress", "egress", "name")
_PROTOCOLS: tuple[Protocol, ...] = ("tcp", "udp", "icmp")
_KV = re.compile(r"(\w+)=(\S+)")


def _address(text: str, where: str, column: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError as exc:
        raise ScenarioError(
            f"{column} {text!r} is not an IP address", where=where, fix="write an address"
        ) from exc


def _port(text: str, where: str, proto: str) -> int | None:
    text = text.strip()
    if proto == "icmp" and text in ("", "-"):
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ScenarioError(
            f"dport {text!r} is not a port (1-65535)",
            where=where,
            fix="write the destination port; leave it empty only for icmp",
        )
    return int(text)


def _weight(text: str, where: str) -> float:
    try:
        w = float(text)
    except ValueError:
        w = math.nan
    if not math.isfinite(w) or w <= 0:
        raise ScenarioError(
            f"weight {text!r} is not a positive number",
            where=where,
            fix="give each flow a positive weight (its share is weight / sum of weights)",
        )
    return w


def _size(text: str, where: str, column: str) -> int:
    try:
        return parse_size(text.strip())
    except ValueError as exc:
        raise ScenarioError(
            f"{column}: {exc}", where=where, fix="write a size such as 64 or 1KiB"
        ) from exc


def read_csv(path: Path) -> list[Flow]:
    path = Path(path)
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    lines = [(n, row) for n, row in enumerate(rows, 1) if row and not row[0].startswith("#")]
    if not lines:
        raise ScenarioError("the flow file is empty", where=str(path), fix="write a header line")
    n0, header = lines[0]
    header = [h.strip().lower() for h in header]
    if tuple(header[: len(CSV_COLUMNS)]) != CSV_COLUMNS or any(
        h not in CSV_OPTIONAL for h in header[len(CSV_COLUMNS) :]
    ):
        raise ScenarioError(
            f"the header is {','.join(header)}",
            where=f"{path}:{n0}",
            fix=f"start the file with {','.join(CSV_COLUMNS)}[,{','.join(CSV_OPTIONAL)}]",
        )
    flows: list[Flow] = []
    for n, row in lines[1:]:
        where = f"{path}:{n}"
        if len(row) != len(header):
            raise ScenarioError(
                f"{len(row)} fields, the header has {len(header)}",
                where=where,
                fix="one value per column (leave optional ones empty)",
            )
        v = dict(zip(header, (x.strip() for x in row), strict=True))
        proto = v["protocol"].lower()
        if proto not in _PROTOCOLS:
            raise ScenarioError(
                f"protocol {v['protocol']!r}", where=where, fix="write tcp, udp or icmp"
            )
        flows.append(
            Flow(
                name=v.get("name") or f"u{len(flows) + 1}",
                protocol=proto,
                src=_address(v["src"], where, "src"),
                dst=_address(v["dst"], where, "dst"),
                dport=_port(v["dport"], where, proto),
                ingress=v.get("ingress") or None,
                egress=v.get("egress") or None,
                request=_size(v["request"], where, "request"),
                response=_size(v["response"], where, "response"),
                weight=_weight(v["weight"], where),
                origin=f"csv:{n}",
            )
        )
    if not flows:
        raise ScenarioError(
            "the flow file has no flows", where=str(path), fix="add a line per flow"
        )
    return flows


def read_conntrack(path: Path) -> list[Flow]:
    """One flow per (protocol, src, dst, dport) of the dump's original directions."""
    path = Path(path)
    order: list[tuple[str, str, str, int | None]] = []
    first: dict[tuple[str, str, str, int | None], int] = {}
    count: dict[tuple[str, str, str, int | None], int] = {}
    for n, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("conntrack v"):  # the summary line conntrack prints
            continue
        where = f"{path}:{n}"
        words = line.split()
        proto = next((w for w in words[:4] if w in _PROTOCOLS), None)
        pairs = _KV.findall(line)
        src = next((v for k, v in pairs if k == "src"), None)
        dst = next((v for k, v in pairs if k == "dst"), None)
        dport = next((v for k, v in pairs if k == "dport"), None)
        if proto is None or src is None or dst is None:
            raise ScenarioError(
                "not a conntrack line (expected `ipv4 2 tcp 6 ... src=... dst=...`)",
                where=where,
                fix="give the output of `conntrack -L -o extended` unchanged",
            )
        key = (
            proto,
            _address(src, where, "src"),
            _address(dst, where, "dst"),
            None if dport is None else _port(dport, where, proto),
        )
        if proto != "icmp" and key[3] is None:
            raise ScenarioError(f"a {proto} entry without dport=", where=where)
        if key not in count:
            order.append(key)
            first[key] = n
            count[key] = 0
        count[key] += 1
    if not order:
        raise ScenarioError(
            "the conntrack dump has no connections", where=str(path), fix="dump a busy router"
        )
    return [
        Flow(
            name=f"c{i}",
            protocol=k[0],  # type: ignore[arg-type]
            src=k[1],
            dst=k[2],
            dport=k[3],
            ingress=None,
            egress=None,
            weight=float(count[k]),
            origin=f"conntrack:{first[k]}",
        )
        for i, k in enumerate(order, 1)
    ]


@dataclass
class _Conn:
    proto: Protocol
    client: tuple[str, int]
    server: tuple[str, int]
    request: int = 0
    response: int = 0


def read_pcap(path: Path) -> list[Flow]:
    """TCP connections (SYN seen) and UDP exchanges, by 5-tuple, in the order they start."""
    path = Path(path)
    conns: dict[tuple[Any, ...], _Conn] = {}
    try:
        with path.open("rb") as fh:
            reader = _pcap_reader(fh)
            for _, buf in reader:
                _packet(reader.datalink(), buf, conns)
    except (ValueError, dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError) as exc:
        raise ScenarioError(
            f"not a readable pcap: {exc}", where=str(path), fix="give a pcap or pcapng file"
        ) from exc
    if not conns:
        raise ScenarioError(
            "the pcap holds no TCP connection (no SYN) and no UDP exchange",
            where=str(path),
            fix="capture from the start of the connections (their SYNs), with -s 0",
        )
    seen: dict[tuple[str, str, int], int] = {}
    for c in conns.values():
        key = (c.proto, c.server[0], c.server[1])
        seen[key] = seen.get(key, 0) + 1
    return [
        Flow(
            name=f"p{i}",
            protocol=c.proto,
            src=c.client[0],
            dst=c.server[0],
            dport=c.server[1],
            ingress=None,
            egress=None,
            sport=None,
            request=c.request,
            response=c.response,
            weight=float(seen[(c.proto, c.server[0], c.server[1])]),
            origin=f"pcap:{path.name}",
        )
        for i, c in enumerate(conns.values(), 1)
    ]


def _pcap_reader(fh: Any) -> Any:
    head = fh.read(4)
    fh.seek(0)
    if head == b"\x0a\x0d\x0d\x0a":
        return dpkt.pcapng.Reader(fh)
    return dpkt.pcap.Reader(fh)


def _packet(link: int, buf: bytes, conns: dict[tuple[Any, ...], _Conn]) -> None:
    if link == dpkt.pcap.DLT_EN10MB:
        ip = dpkt.ethernet.Ethernet(buf).data
    elif link in (dpkt.pcap.DLT_RAW, 101, 228, 229):
        ip = dpkt.ip6.IP6(buf) if buf and buf[0] >> 4 == 6 else dpkt.ip.IP(buf)
    elif link == dpkt.pcap.DLT_LINUX_SLL:
        ip = dpkt.sll.SLL(buf).data
    else:
        return
    if not isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6):
        return
    l4 = ip.data
    if isinstance(l4, dpkt.tcp.TCP):
        proto: Protocol = "tcp"
    elif isinstance(l4, dpkt.udp.UDP):
        proto = "udp"
    else:
        return
    fam = socket.AF_INET6 if isinstance(ip, dpkt.ip6.IP6) else socket.AF_INET
    a = (socket.inet_ntop(fam, ip.src), l4.sport)
    b = (socket.inet_ntop(fam, ip.dst), l4.dport)
    key = (proto, *sorted([a, b]))
    conn = conns.get(key)
    if conn is None:
        if proto == "tcp" and not (l4.flags & dpkt.tcp.TH_SYN and not l4.flags & dpkt.tcp.TH_ACK):
            return  # a connection whose start the capture missed
        conn = conns[key] = _Conn(proto, a, b)
    if (a, b) == (conn.client, conn.server):
        conn.request += len(l4.data)
    else:
        conn.response += len(l4.data)


def check_weights(flows: Sequence[Flow]) -> None:
    """Every weight positive and finite; a CSV's bad weight named by its line."""
    for f in flows:
        if not math.isfinite(f.weight) or f.weight <= 0:
            where = f.origin.replace("csv:", "line ") if f.origin.startswith("csv:") else f.origin
            raise ScenarioError(
                f"flow {f.name} ({f.describe()}) has weight {f.weight}",
                where=where,
                fix="give each flow a positive, finite weight",
            )
    if not flows:
        raise ScenarioError("no flows", fix="give at least one flow")

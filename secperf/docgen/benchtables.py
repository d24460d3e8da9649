"""performance.md's bench tables, from the kept files in bench/runs/.

A block `<!-- bench-table: NAME bench/runs/FILE.json [CASE-PREFIX] -->` holds the table
of that file's rows (those whose case starts with CASE-PREFIX, when given), the command
that made it (the file's own record of it where it keeps one, else the bench's usual
command from bench/README.md), and the other kept files of the same bench, listed, not
quoted. Which columns a bench's table has is data (`BENCHES`): one entry per bench
script, how its file holds its rows and how each column reads a row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIND = "bench-table"
Row = dict[str, Any]


def _num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, list):
        return " / ".join(_num(v, digits) for v in x)
    v = float(x)
    if abs(v) >= 10**digits:
        return f"{v:,.0f}"
    return f"{v:,.{digits}g}"


def _ratio(x: Any) -> str:
    return "–" if x is None else f"{float(x):.3f}"


def _pct(x: Any) -> str:
    return "–" if x is None else f"{float(x):.2f} %"


def _gbps(x: Any) -> str:
    return "–" if x is None else f"{float(x) / 1e9:.2f}"


Column = tuple[str, Callable[[Row], str]]


@dataclass(frozen=True)
class Bench:
    rows: Callable[[Row], Iterable[Row]]
    columns: list[Column]
    command: str  # the usual command, where the file keeps none of its own
    case: str = "case"  # the field a CASE-PREFIX filters on


def _keyed(field: str, key: str = "key") -> Callable[[Row], Iterable[Row]]:
    """A dict of rows by name as a list, the name under `key`."""
    return lambda d: ({key: k, **v} for k, v in (d.get(field) or {}).items())


def _nginx(d: Row) -> Iterable[Row]:
    for config, cases in (d.get("rates") or {}).items():
        for case, rates in cases.items():
            yield {"config": config, "case": case, "rates": rates}


def _placement(d: Row) -> Iterable[Row]:
    for run in d.get("runs") or []:
        for name, fig in (run.get("figures") or {}).items():
            yield {"placement": run["placement"], "case": name, **fig}


def _memory(d: Row) -> Iterable[Row]:
    r = d.get("result") or {}
    yield {**(r.get("memory") or {}), "established": r.get("established")}


def _flows(d: Row) -> Iterable[Row]:
    o = d.get("overhead") or {}
    g = o.get("ratio") or {}
    yield {
        "case": "flows against crr, no rules (flows/s ÷ conn/s)",
        "a": o.get("flows_median"),
        "b": o.get("crr_median"),
        "ratio": f"{_ratio(g.get('geomean'))} [{_ratio(g.get('low'))}, {_ratio(g.get('high'))}]",
    }
    for r in (d.get("thousand_rules") or {}).get("rows") or []:
        yield {
            "case": f"{r['variant']} {r['metric']} (1000 rules vs none)",
            "a": r.get("mean"),
            "b": r.get("baseline_mean"),
            "ratio": "–"
            if r.get("degradation_pct") is None
            else f"Δ {_num(r['degradation_pct'], 3)} % [{_num(r.get('degradation_ci_low'), 3)}, "
            f"{_num(r.get('degradation_ci_high'), 3)}]",
        }


def _get(field: str, fmt: Callable[[Any], str] = _num) -> Callable[[Row], str]:
    return lambda r: fmt(r.get(field))


PEER_ROWS: list[Column] = [
    ("case", lambda r: " ".join(str(r[k]) for k in ("case", "tool") if r.get(k))),
    ("unit", _get("unit", str)),
    ("engine", _get("engine_rate")),
    ("peer", lambda r: f"{_num(r.get('peer_rate'))} ({r.get('peer')})"),
    ("engine/peer", _get("rate_ratio", _ratio)),
    ("CPU µs/req engine", _get("engine_cpu_us_per_request")),
    ("CPU µs/req peer", _get("peer_cpu_us_per_request")),
    ("CPU e/p", _get("cpu_us_per_request_ratio", _ratio)),
]

BENCHES: dict[str, Bench] = {
    "engine_vs_peers": Bench(
        rows=lambda d: d.get("summary") or [],
        columns=[
            ("path", _get("path", str)),
            ("test", _get("title", str)),
            ("metric", lambda r: f"{r['label']} {'↑' if r.get('higher_better') else '↓'}"),
            ("engine", _get("engine")),
            (
                "peer",
                lambda r: f"{_num(r.get('peer_median'))} ({r['peer']})" if r.get("peer") else "–",
            ),
            ("engine/peer", _get("ratio", _ratio)),
            ("CPU unit", _get("demand_unit", str)),
            ("CPU engine", lambda r: _num(r.get("demand_engine"), 3)),
            ("CPU peer", lambda r: _num(r.get("demand_peer"), 3)),
            ("verdict", lambda r: str(r.get("verdict") or "")),
        ],
        command=".venv/bin/python bench/engine_vs_peers.py --pairs 5 --duration 5",
        case="test",
    ),
    "http_ftp_vs_peers": Bench(
        rows=lambda d: d.get("rows") or [],
        columns=PEER_ROWS,
        command=".venv/bin/python bench/http_ftp_vs_peers.py --pairs 5",
    ),
    "https_vs_peers": Bench(
        rows=lambda d: d.get("rows") or [],
        columns=PEER_ROWS,
        command=".venv/bin/python bench/https_vs_peers.py --pairs 5",
    ),
    "nginx_configs": Bench(
        rows=_nginx,
        columns=[
            ("nginx", _get("config", str)),
            ("fetches", _get("case", str)),
            ("fetches/s, each round", _get("rates")),
        ],
        command=".venv/bin/python bench/nginx_configs.py",
    ),
    "vpn_vs_iperf3": Bench(
        rows=lambda d: d.get("rows") or [],
        columns=[
            ("path", _get("path", str)),
            ("engine Gbit/s (median)", _get("engine_median_bps", _gbps)),
            ("iperf3 Gbit/s (median)", _get("iperf3_median_bps", _gbps)),
            ("engine/iperf3 (median of pairs)", _get("ratio", _ratio)),
        ],
        command=".venv/bin/python bench/vpn_vs_iperf3.py --pairs 5 --duration 3",
        case="path",
    ),
    "latency_load_vs_trafgen": Bench(
        rows=_keyed("summary", "case"),
        columns=[
            ("asked / direction", _get("case", str)),
            ("secperf sent/s", _get("secperf_sent_pps")),
            ("trafgen sent/s", _get("trafgen_sent_pps")),
            ("secperf/trafgen", _get("ratio_sent", _ratio)),
            ("secperf received/s", _get("secperf_received_pps")),
            ("trafgen received/s", _get("trafgen_received_pps")),
        ],
        command=".venv/bin/python bench/latency_load_vs_trafgen.py --seconds 3 --rounds 5",
    ),
    "ips_nfq_vs_fwsnort": Bench(
        rows=_keyed("summary", "case"),
        columns=[
            ("DUT / asked each way", _get("case", str)),
            ("sent/s", _get("sent_pps")),
            ("received/s", _get("received_pps")),
            ("loss", _get("loss_pct", _pct)),
            ("delay p99 µs", _get("delay_p99_us")),
            ("≥ 60,000/s with < 0.1 % loss", lambda r: "yes" if r.get("meets_target") else "no"),
        ],
        command=".venv/bin/python bench/ips_nfq_vs_fwsnort.py --seconds 3 --rounds 5",
    ),
    "placement": Bench(
        rows=_placement,
        columns=[
            ("placement", _get("placement", str)),
            ("workload, variant", _get("case", str)),
            ("mean", _get("mean")),
            ("Δ %", lambda r: _num(r.get("degradation_pct"), 3)),
            ("Δ half width, points", lambda r: _num(r.get("halfwidth_pp"), 2)),
            ("limited by", _get("bottleneck", str)),
        ],
        command=".venv/bin/python bench/placement.py --rounds 6 --repeats 1",
    ),
    "connections_open_rate": Bench(
        rows=lambda d: d.get("results") or [],
        columns=[
            ("round", _get("round", str)),
            ("connections", _get("connections")),
            ("client addresses", _get("sources", str)),
            ("opened/s", _get("open_rate")),
            ("held", _get("capacity")),
            ("processes", _get("processes", str)),
            ("stopped by", _get("stopped_by", str)),
        ],
        command=".venv/bin/python bench/connections_open_rate.py",
    ),
    "connections_memory": Bench(
        rows=_memory,
        columns=[
            ("connections held", _get("established")),
            ("client bytes a connection", _get("client_bytes_per_connection")),
            ("client RSS, bytes", _get("client_rss_bytes")),
            ("server RSS, bytes", _get("server_rss_bytes")),
        ],
        command="(the file's own command)",
    ),
    "flows_vs_crr": Bench(
        rows=_flows,
        columns=[
            ("comparison", _get("case", str)),
            ("flows / with rules", _get("a")),
            ("crr / without", _get("b")),
            ("ratio or Δ", _get("ratio", str)),
        ],
        command=".venv/bin/python bench/flows_vs_crr.py --pairs 8 --duration 2 --budget 6min",
    ),
}

# a file is named BENCH-DATE…; these files' names do not say which bench made them
ALIASES = {"http_ka_vs_wrk": "http_ftp_vs_peers", "http_vs_wrk": "http_ftp_vs_peers"}


def bench_of(path: Path) -> str:
    stem = path.name.split("-20", 1)[0]
    return ALIASES.get(stem, stem)


def _flag(key: str, value: Any) -> str:
    text = str(value)
    if text.startswith("["):  # a list as the bench's argparse recorded it
        text = text.strip("[]").replace(" ", "")
    return f"--{key.replace('_', '-')} {text}"


def started(path: Path) -> str:
    """When a kept file's bench started, as the file records it (ISO 8601), else ""."""
    data = json.loads(path.read_text("utf-8"))
    return str(
        data.get("started") or data.get("date") or (data.get("meta") or {}).get("when") or ""
    )


def _command(data: Row, bench: Bench, name: str, file: str) -> str:
    """The command that made `file`: the file's own record of it, else its recorded
    arguments, else the bench's usual command; always naming the file as kept."""
    meta = data.get("meta") or {}
    own = data.get("command") or meta.get("command")
    if own:
        own = str(own)
        return own if own.startswith(("secperf", ".venv")) else f".venv/bin/python {own}"
    args, config = data.get("args"), data.get("config")
    if isinstance(args, dict):
        # the engine's path is the machine's, and the file may have been renamed when kept
        flags = [_flag(k, v) for k, v in args.items() if k not in ("engine", "out") and v]
    elif isinstance(config, dict) and "duration_s" in config:  # engine_vs_peers
        flags = [f"--pairs {config['pairs']}", f"--duration {config['duration_s']:g}"]
        flags += [f"--netperf {config['netperf']}"] if config.get("netperf") else []
    elif "pairs" in data and "duration_s" in data:  # vpn_vs_iperf3
        flags = [f"--pairs {data['pairs']}", f"--duration {data['duration_s']:g}"]
    else:
        return f"{bench.command} --out {file}"
    return f".venv/bin/python bench/{name}.py {' '.join(flags)} --out {file}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def make(root: Path, args: list[str]) -> str:
    if len(args) not in (2, 3):
        raise ValueError(f"<!-- {KIND}: {' '.join(args)} --> names a bench, its file, a case")
    name, file = args[0], root / args[1]
    bench = BENCHES[name]
    data = json.loads(file.read_text("utf-8"))
    rows = [
        r
        for r in bench.rows(data)
        if len(args) < 3 or str(r.get(bench.case, "")).startswith(args[2])
    ]
    head = [h for h, _ in bench.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(get(r)) for _, get in bench.columns) + " |" for r in rows]
    others = sorted(
        p.name
        for p in (root / "bench" / "runs").glob("*.json")
        if bench_of(p) == bench_of(file) and p != file
    )
    older = f"\n\nOther kept files of this bench: {', '.join(others)}." if others else ""
    return (
        f"`{args[1]}`, made by `{_command(data, bench, name, args[1])}`:\n\n"
        + "\n".join(lines)
        + older
    )

"""secperf-engine's flood against trafgen and hping3, in one namespace testbed.

Run as root from the checkout: `python bench/flood_vs_peers.py [--seconds 3]`.
For each tool, pinned to one core (taskset -c 1) in the attacker namespace, a UDP
flood of 46-byte IP packets (64-byte frames) goes to the server across the
forwarding DUT: at the highest rate the tool reaches, and (engine, trafgen) at
1k, 10k and 100k packets/s. Packets are counted where they arrive, with an nft
counter in the server namespace, and where they leave (the attacker veth's
tx_packets); the rate error is the server's count against the asked rate.
hping3 has no rate control (`-i uN` is a gap, not a rate): only its --flood
maximum is measured. Then the maximums again "sender only": the attacker's
neighbour entry for the DUT (and trafgen's frames) point at an unused MAC, so the
DUT's veth drops every frame on arrival and the count (tx_packets) is what the
generator alone does on its core, without the forwarding path it otherwise drives
in the same softirq. trafgen only runs inside a namespace (it tries to change
global sysctls). Every maximum run is stopped by `timeout -s INT SECONDS`, so
every tool's count covers the same seconds (an outer timeout bounds every process).
The engine runs with its default sender (auto: AF_PACKET frames on the attacker's
veth) and, as "engine-raw", with the raw IP socket it had before. The testbed is
torn down on the way out.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from secperf.testbed.testbed import Host, Testbed
from secperf.testbed.topology import Topology
from secperf.tools import engine_path

SERVER = "198.18.2.2"
ATTACKER = "198.18.4.2"
PORT = 9
PAYLOAD = 18  # 20 + 8 + 18 = 46-byte IP packets: 64-byte Ethernet frames with FCS
RATES = (1_000, 10_000, 100_000)
CORE = "1"


@dataclass
class Row:
    tool: str
    asked: int | None  # None: as fast as the tool goes
    seconds: float
    sent: int  # attacker veth tx_packets
    arrived: int  # nft counter at the server
    sender_only: bool = False  # frames dropped at the DUT's veth: rate = sent

    @property
    def error_pct(self) -> float | None:
        """The rate counted at the server against the asked rate (paced rows only)."""
        if self.asked is None:
            return None
        return (self.arrived / self.seconds - self.asked) / self.asked * 100


def counter(tb: Testbed) -> int:
    out = tb.host("server").run(["nft", "-j", "list", "table", "inet", "bench_count"]).stdout
    for item in json.loads(out)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return int(expr["counter"]["packets"])
    raise RuntimeError("no counter in the server namespace")


def tx_packets(host: Host, ifname: str) -> int:
    out = host.run(["cat", f"/sys/class/net/{ifname}/statistics/tx_packets"]).stdout
    return int(out.strip())


def measure(tb: Testbed, tool: str, asked: int | None, seconds: float, argv: list[str]) -> Row:
    att = tb.host("attacker")
    ifname = tb.ifname("attacker-dut", "attacker")
    rx0, tx0 = counter(tb), tx_packets(att, ifname)
    proc = att.run(
        ["timeout", "-s", "INT", str(seconds + 5), "taskset", "-c", CORE, *argv],
        check=False,
        timeout=seconds + 15,
    )
    if proc.returncode not in (0, 124, 130):
        print(f"{tool} exited {proc.returncode}: {proc.stderr.strip()[-300:]}", file=sys.stderr)
    return Row(tool, asked, seconds, tx_packets(att, ifname) - tx0, counter(tb) - rx0)


def engine_argv(rate: int, seconds: float, sender: str = "auto") -> list[str]:
    spec = {
        "kind": "flood",
        "flood": "udp",
        "target": SERVER,
        "ports": str(PORT),
        "rate_pps": rate,
        "duration": seconds,
        "payload_size": PAYLOAD,
        "interval": 0,
        "sender": sender,
    }
    return [engine_path(), "run", "--spec", json.dumps(spec)]


# Locally administered and unused: frames to it die at the DUT's veth.
NOWHERE_MAC = "02:00:00:00:00:99"


def trafgen_conf(tb: Testbed, directory: Path, mac: str | None = None) -> Path:
    if mac is None:
        dut_if = tb.ifname("attacker-dut", "dut")
        mac = tb.host("dut").run(["cat", f"/sys/class/net/{dut_if}/address"]).stdout.strip()
    conf = directory / f"udp-{mac.replace(':', '')}.cfg"
    conf.write_text(
        "{\n"
        f"  eth(da={mac}, type=0x0800),\n"
        f"  ipv4(saddr={ATTACKER}, daddr={SERVER}, ttl=64, proto=17),\n"
        f"  udp(sport=40000, dport={PORT}),\n"
        f"  fill(0x01, {PAYLOAD})\n"
        "}\n"
    )
    return conf


def trafgen_argv(tb: Testbed, conf: Path, rate: int | None, seconds: float) -> list[str]:
    dev = tb.ifname("attacker-dut", "attacker")
    argv = ["trafgen", "--dev", dev, "--conf", str(conf), "--cpus", "1"]
    if rate is not None:
        return [*argv, "--rate", f"{rate}pps", "--num", str(int(rate * seconds))]
    # Unbounded count, stopped after `seconds` like hping3 (a --num bound would
    # let it run past `seconds` and inflate its rate).
    return ["timeout", "-s", "INT", str(seconds), *argv]


def max_rows(tb: Testbed, conf: Path, secs: float) -> list[Row]:
    """Each tool as fast as it goes (the engine asked for 10 Mpps)."""
    hping = ["hping3", "--udp", "-p", str(PORT), "-d", str(PAYLOAD), "--flood", "-q", SERVER]
    return [
        measure(tb, "engine", None, secs, engine_argv(10_000_000, secs)),
        measure(tb, "engine-raw", None, secs, engine_argv(10_000_000, secs, "raw")),
        measure(tb, "trafgen", None, secs, trafgen_argv(tb, conf, None, secs)),
        measure(tb, "hping3", None, secs, ["timeout", "-s", "INT", str(secs), *hping]),
    ]


def sender_only_rows(tb: Testbed, directory: Path, secs: float) -> list[Row]:
    """The maximums with every frame addressed to a MAC nobody has."""
    dev = tb.ifname("attacker-dut", "attacker")
    gateway = tb.host("attacker").run(["ip", "-o", "-4", "route", "get", SERVER]).stdout.split()
    via = gateway[gateway.index("via") + 1]
    neigh = ["ip", "neigh", "replace", via, "dev", dev, "lladdr", NOWHERE_MAC, "nud", "permanent"]
    tb.host("attacker").run(neigh)
    try:
        rows = max_rows(tb, trafgen_conf(tb, directory, NOWHERE_MAC), secs)
    finally:
        tb.host("attacker").run(["ip", "neigh", "del", via, "dev", dev], check=False)
    for r in rows:
        r.sender_only = True
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    secs: float = args.seconds
    rows: list[Row] = []
    with (
        Testbed.build(Topology.standard(attacker=True)) as tb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        tb.host("server").run(
            ["nft", "-f", "-"],
            input="table inet bench_count { chain input { type filter hook input priority -10; "
            f"policy accept; udp dport {PORT} counter; }}; }}\n",
        )
        conf = trafgen_conf(tb, Path(tmp))
        # Warm the neighbour caches so the first packets are not queued behind ARP.
        tb.host("attacker").run(["ping", "-c", "1", "-W", "1", SERVER], check=False)
        rows += max_rows(tb, conf, secs)
        for rate in RATES:
            rows.append(measure(tb, "engine", rate, secs, engine_argv(rate, secs)))
            raw = engine_argv(rate, secs, "raw")
            rows.append(measure(tb, "engine-raw", rate, secs, raw))
            rows.append(measure(tb, "trafgen", rate, secs, trafgen_argv(tb, conf, rate, secs)))
        rows += sender_only_rows(tb, Path(tmp), secs)
    print(f"{'tool':10} {'asked pps':>13} {'sent pps':>10} {'arrived pps':>12} {'error %':>8}")
    for r in rows:
        asked = "max" if r.asked is None else str(r.asked)
        asked = f"{asked} (sender)" if r.sender_only else asked
        err = "-" if r.error_pct is None else f"{r.error_pct:+.2f}"
        sent, arrived = r.sent / r.seconds, r.arrived / r.seconds
        print(f"{r.tool:10} {asked:>13} {sent:>10.0f} {arrived:>12.0f} {err:>8}")
    print("(sender): frames dropped at the DUT's veth; the rate is what the tool sent")
    print("hping3: no rate control (-i uN is a gap between packets, not a rate); max only")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

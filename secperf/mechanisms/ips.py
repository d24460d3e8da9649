"""Intrusion prevention inline (`ips`) and intrusion detection on a mirror (`ids`).

Document 004 §V measured a router's IPS inline (every packet inspected before it
is forwarded) and in promiscuous mode (a copy inspected beside the path). Suricata
and Snort are not packaged on secperf's platform, so the real parts are:

- `ips`, engine "nfq": every forwarded packet goes to `secperf-nfq` on NFQUEUE
  (`-j NFQUEUE` without `--queue-bypass`: without the daemon nothing passes, fail
  closed), which matches its payload against the rule file's signatures with
  Hyperscan; a matching `drop` rule gets a drop verdict, `alert` rules count.
- `ips`, engine "fwsnort": Debian's fwsnort translates the same rule file into
  iptables string-match rules (LOG for every rule, DROP after the LOG for `drop`
  rules), run inside the DUT namespace with every file in the run directory, and
  loaded with iptables-nft-restore: matching in the kernel.
- `ids`: the DUT duplicates every packet that enters it (nft netdev `dup to`, on
  the ingress of each of its interfaces but the sensor's) to the `ids` host, where
  `secperf-nfq --packet-socket` runs the same matcher and only counts. The
  forwarded packets are untouched.

Each release appends the engine's counters (packets, alerts, drops, per sid; the
kernel's queue overflows; the sensor's own drops) as one JSON line to
`<name>.<host>.ips-stats.jsonl` in the run's files directory.
"""

from __future__ import annotations

import ipaddress
import json
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf import ips_rules
from secperf.errors import MechanismError
from secperf.mechanisms.acl import apply_files
from secperf.mechanisms.appliance import _read_line
from secperf.mechanisms.base import MechanismContext, RenderedFile
from secperf.testbed.testbed import Host, ManagedProcess
from secperf.tools import nfq_path

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def rules_text(rules: Path | int) -> str:
    """The rule file's text: the file itself, or N generated rules."""
    if isinstance(rules, int):
        return ips_rules.generate_rules(rules)
    return Path(rules).read_text()


def load_rules(rules: Path | int) -> list[ips_rules.Rule]:
    if isinstance(rules, int):
        return ips_rules.parse_text(rules_text(rules), f"<{rules} generated rules>")
    return ips_rules.parse_rules(Path(rules))


def write_rule_files(rules: Path | int, ctx: MechanismContext) -> tuple[Path, Path]:
    """The rule file as used (a copy, or the generated one) and its normalized JSON."""
    ctx.files_dir.mkdir(parents=True, exist_ok=True)
    parsed = load_rules(rules)
    src = ctx.files_dir / f"{ctx.name}.rules"
    src.write_text(rules_text(rules))
    js = ctx.files_dir / f"{ctx.name}.rules.json"
    js.write_text(ips_rules.normalized(parsed))
    return src, js


@dataclass
class _Daemon:
    proc: ManagedProcess
    stats: Path
    out: Path


def start_matcher(host: Host, argv: list[str], stats: Path, err: Path, what: str) -> ManagedProcess:
    """Start secperf-nfq in `host` and wait for its `listening` line."""
    stats.unlink(missing_ok=True)
    with err.open("a") as e:
        proc = host.spawn(
            [nfq_path(), *argv, "--stats", str(stats)],
            stdout=subprocess.PIPE,
            stderr=e,
            label="secperf-nfq",
        )
    line = _read_line(proc, time.monotonic() + READY_TIMEOUT_S)
    if line is None or '"listening"' not in line:
        proc.stop(timeout=2.0)
        said = (line or "").strip() or err.read_text().strip()[-500:]
        raise MechanismError(
            f"secperf-nfq ({what}) did not start: {said or 'no output'}",
            where=str(err),
            fix="run `secperf check` on the scenario; is the engine built (scripts/setup.sh)?",
        )
    return proc


def stop_matcher(d: _Daemon, extra: dict[str, Any]) -> None:
    """SIGTERM (the daemon writes its counters and exits), then append them to d.out."""
    d.proc.stop(timeout=STOP_TIMEOUT_S)
    if d.stats.is_file():
        record = json.loads(d.stats.read_text())
        record.update(extra)
        with d.out.open("a") as f:
            f.write(json.dumps(record) + "\n")


def host_name(host: Host) -> str:
    """The host's name in the testbed graph ("dut", "ids"), not its namespace's."""
    return host.role


def _stats_paths(ctx: MechanismContext, host: Host) -> tuple[Path, Path, Path]:
    stem = f"{ctx.name}.{host_name(host)}"
    return (
        ctx.files_dir / f"{stem}.nfq-stats.json",
        ctx.files_dir / f"{stem}.ips-stats.jsonl",
        ctx.files_dir / f"{stem}.nfq.stderr",
    )


# ------------------------------------------------------------------------- fwsnort


def fwsnort_input(parsed: list[ips_rules.Rule], text: str) -> str:
    """fwsnort translates `alert` rules only (it skips `drop`): give it every rule as
    alert; which of them also drop is decided afterwards (fwsnort_save)."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        out.append(re.sub(r"^drop\s", "alert ", s) if s and not s.startswith("#") else line)
    return "\n".join(out) + "\n"


def fwsnort_save(save: str, drop_sids: set[int]) -> tuple[str, list[int]]:
    """Keep fwsnort's DROP rule only after the LOG rule of a `drop` rule's sid;
    return the file and the sids it has rules for."""
    lines, sids, last = [], [], None
    for line in save.splitlines():
        m = re.search(r'--comment "sid:(\d+);', line)
        if m:
            last = int(m.group(1))
            if last not in sids:
                sids.append(last)
        if line.startswith("-A ") and line.rstrip().endswith("-j DROP") and last not in drop_sids:
            continue
        lines.append(line)
    return "\n".join(lines) + "\n", sids


def fwsnort_counters(save_c: str) -> dict[str, Any]:
    """Per sid: packets its LOG rule saw (alerts) and its DROP rule dropped, from
    `iptables-save -c`."""
    alerts: dict[str, int] = {}
    drops = 0
    last: str | None = None
    for line in save_c.splitlines():
        m = re.match(r"\[(\d+):(\d+)\] -A (\S+) (.*)$", line)
        if not m:
            continue
        pkts, rest = int(m.group(1)), m.group(4)
        sid = re.search(r'--comment "sid:(\d+);', rest)
        if sid and "-j LOG" in rest:
            last = sid.group(1)
            alerts[last] = alerts.get(last, 0) + pkts
        elif rest.rstrip().endswith("-j DROP") and last is not None:
            drops += pkts
    return {
        "alerts": sum(alerts.values()),
        "drops": drops,
        "by_sid": {k: v for k, v in alerts.items() if v},
    }


FWSNORT_CONF = Path("/etc/fwsnort/fwsnort.conf")


@dataclass
class Ips:
    engine: str = "nfq"
    rules: Path | int = Path("rules/secperf-attacks.rules")
    mode: str = "inline"
    queue: int = 0
    # Bounded per-flow TCP reassembly in secperf-nfq (0: off, packets matched alone).
    reassembly_bytes: int = 0
    reassembly_flows: int = 4096
    kind: str = "ips"
    _daemons: dict[str, _Daemon] = field(default_factory=dict, repr=False, compare=False)

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        src, js = write_rule_files(self.rules, ctx)
        if self.engine == "fwsnort":
            parsed = ips_rules.parse_rules(src)
            fw_in = ctx.files_dir / f"{ctx.name}.fwsnort.rules"
            fw_in.write_text(fwsnort_input(parsed, src.read_text()))
            # The .save file is written on the DUT by apply(): fwsnort probes iptables
            # where it runs, which must be the DUT's namespace.
            return [RenderedFile(ctx.files_dir / f"{ctx.name}.fwsnort.save", "iptables-restore")]
        chain = "INPUT" if ctx.hook == "input" else "FORWARD"
        ipt = ctx.files_dir / f"{ctx.name}.iptables"
        ipt.write_text(
            f"# secperf ips (nfq): every {chain.lower()}ed packet to secperf-nfq on queue "
            f"{self.queue}, no --queue-bypass (fail closed)\n"
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
            f"-A {chain} -j NFQUEUE --queue-num {self.queue}\nCOMMIT\n"
        )
        return [RenderedFile(js, "ips-rules"), RenderedFile(ipt, "iptables-restore")]

    def backends(self) -> set[str]:
        return {"nft", "iptables-nft"}

    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        if self.engine == "fwsnort":
            self._apply_fwsnort(dut, ctx)
            return
        # The daemon first: once the rule is in, every packet needs it.
        self.restart_daemons(dut, ctx)
        ipt = [f for f in ctx.rendered if f.tool == "iptables-restore"]
        apply_files(dut, ipt, "iptables-nft", ctx.plan.family)

    def _apply_fwsnort(self, dut: Host, ctx: MechanismContext) -> None:
        if ctx.plan.family != 4:
            raise MechanismError(
                "the fwsnort engine is set up for IPv4 only",
                where="mechanism ips, key engine",
                fix='use engine = "nfq" for IPv6, or run the scenario over IPv4',
            )
        save = ctx.files_dir / f"{ctx.name}.fwsnort.save"
        if not save.is_file():
            work = ctx.files_dir / f"{ctx.name}.fwsnort"
            work.mkdir(parents=True, exist_ok=True)
            conf = work / "fwsnort.conf"
            text = FWSNORT_CONF.read_text()
            text = re.sub(r"(?m)^WHITELIST\s.*$", "WHITELIST               NONE;", text)
            text = re.sub(r"(?m)^(LOG_DIR|STATE_DIR)\s.*$", rf"\1    {work};", text)
            conf.write_text(text)
            proc = dut.run(
                [
                    "fwsnort",
                    "-c",
                    str(conf),
                    "--snort-rfile",
                    str(ctx.files_dir / f"{ctx.name}.fwsnort.rules"),
                    "--no-ipt-sync",
                    "--ipt-drop",
                    "--no-addresses",
                    "--logfile",
                    str(work / "fwsnort.log"),
                    "--ipt-script",
                    str(work / "fwsnort.sh"),
                ],
                check=False,
            )
            (work / "fwsnort.out").write_text(proc.stdout + proc.stderr)
            raw = work / "fwsnort.save"
            if proc.returncode != 0 or not raw.is_file():
                raise MechanismError(
                    f"fwsnort failed: {(proc.stderr or proc.stdout).strip()[-500:]}",
                    where=str(work / "fwsnort.out"),
                    fix="is fwsnort installed (scripts/setup.sh)? check the rule file",
                )
            parsed = ips_rules.parse_rules(ctx.files_dir / f"{ctx.name}.rules")
            drops = {r.sid for r in parsed if r.action == "drop"}
            text, sids = fwsnort_save(raw.read_text(), drops)
            if ctx.hook == "input":
                text = re.sub(r"(?m)^-A FORWARD .*\n", "", text)
            missing = sorted({r.sid for r in parsed} - set(sids))
            (work / "untranslated-sids.json").write_text(json.dumps(missing) + "\n")
            save.write_text(text)
        apply_files(dut, [RenderedFile(save, "iptables-restore")], "iptables-nft", ctx.plan.family)

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        extra = {"engine": self.engine, "host": host_name(dut), "variant": ctx.name}
        if self.engine == "fwsnort":
            proc = dut.run(["iptables-nft-save", "-c"], check=False)
            record = {"event": "stopped", "mode": "fwsnort", **fwsnort_counters(proc.stdout)}
            with _stats_paths(ctx, dut)[1].open("a") as f:
                f.write(json.dumps({**record, **extra}) + "\n")
            return
        d = self._daemons.pop(host_name(dut), None)
        if d is not None:
            stop_matcher(d, extra)

    # -- DaemonMechanism ------------------------------------------------------------
    def daemons(self) -> list[ManagedProcess]:
        return [d.proc for d in self._daemons.values() if d.proc.poll() is None]

    def kill_daemons(self) -> list[str]:
        killed = []
        for d in self._daemons.values():
            if d.proc.poll() is None:
                d.proc.popen.send_signal(signal.SIGKILL)
                d.proc.stop(timeout=5.0)
                killed.append(f"{d.proc.label} (pid {d.proc.pid})")
        self._daemons.clear()
        return killed

    def restart_daemons(self, dut: Host, ctx: MechanismContext) -> None:
        """Start (again) the matcher daemon alone; the NFQUEUE rule stays."""
        if self.engine != "nfq":
            return
        stats, out, err = _stats_paths(ctx, dut)
        js = ctx.files_dir / f"{ctx.name}.rules.json"
        argv = ["--queue", str(self.queue), "--rules", str(js)]
        if self.reassembly_bytes:
            argv += [
                "--reassembly-bytes",
                str(self.reassembly_bytes),
                "--reassembly-flows",
                str(self.reassembly_flows),
            ]
        proc = start_matcher(dut, argv, stats, err, f"ips on queue {self.queue}")
        self._daemons[host_name(dut)] = _Daemon(proc, stats, out)


# ------------------------------------------------------------------------- ids


def _addresses(host: Host) -> list[tuple[str, str]]:
    """(interface, address/prefix) of every IPv4 address on the host but loopback."""
    proc = host.run(["ip", "-j", "-4", "addr", "show"])
    out = []
    for link in json.loads(proc.stdout or "[]"):
        for a in link.get("addr_info", []):
            if link["ifname"] != "lo":
                out.append((str(link["ifname"]), f"{a['local']}/{a['prefixlen']}"))
    return out


def render_mirror(table: str, devices: Sequence[str], sensor_dev: str) -> str:
    lines = [
        f"# secperf ids: a copy of every packet entering {', '.join(devices)} to {sensor_dev}",
        f"table netdev {table} {{",
    ]
    for i, dev in enumerate(devices):
        lines += [
            f"  chain mirror{i} {{",
            f'    type filter hook ingress device "{dev}" priority 0; policy accept;',
            f'    dup to "{sensor_dev}"',
            "  }",
        ]
    return "\n".join([*lines, "}"]) + "\n"


@dataclass
class Ids:
    """A GroupMechanism: `on` names the hosts that mirror (default the DUT) and the
    sensor (a host with role "ids"), which is the last of them."""

    rules: Path | int = Path("rules/secperf-attacks.rules")
    kind: str = "ids"
    _daemons: dict[str, _Daemon] = field(default_factory=dict, repr=False, compare=False)

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        _src, js = write_rule_files(self.rules, ctx)
        return [RenderedFile(js, "ips-rules")]

    def backends(self) -> set[str]:
        return {"nft"}

    def target_address(self, ctx: MechanismContext, server: str, family: int) -> str | None:
        return None

    def _split(self, hosts: Sequence[Host], ctx: MechanismContext) -> tuple[list[Host], Host]:
        topo = ctx.topology
        sensors = [h for h in hosts if topo is not None and topo.host(host_name(h)).role == "ids"]
        if len(sensors) != 1 or len(hosts) < 2:
            raise MechanismError(
                f"ids on {[host_name(h) for h in hosts]}: needs the mirroring hosts and exactly "
                'one host with role "ids"',
                where="mechanism ids, key on",
                fix='write on = ["dut", "ids"] (the default) with an ids host in the testbed',
            )
        return [h for h in hosts if h is not sensors[0]], sensors[0]

    def apply_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        routers, sensor = self._split(hosts, ctx)
        sensor_addrs = _addresses(sensor)
        if len(sensor_addrs) != 1:
            raise MechanismError(
                f"the ids host {host_name(sensor)} has {len(sensor_addrs)} interfaces: "
                "expected one",
                where=host_name(sensor),
                fix="link the ids host to the one router that mirrors to it",
            )
        sensor_if, sensor_addr = sensor_addrs[0]
        sensor_net = ipaddress.ip_interface(sensor_addr).network
        stats, out, err = _stats_paths(ctx, sensor)
        js = ctx.files_dir / f"{ctx.name}.rules.json"
        proc = start_matcher(
            sensor, ["--packet-socket", sensor_if, "--rules", str(js)], stats, err, "ids sensor"
        )
        self._daemons[host_name(sensor)] = _Daemon(proc, stats, out)
        for router in routers:
            addrs = _addresses(router)
            to_sensor = [d for d, a in addrs if ipaddress.ip_interface(a).network == sensor_net]
            if not to_sensor:
                raise MechanismError(
                    f"{host_name(router)} has no link to the ids host {host_name(sensor)}",
                    where=host_name(router),
                    fix="link the ids host to the router that mirrors",
                )
            devices = sorted({d for d, _ in addrs} - set(to_sensor))
            f = ctx.files_dir / f"{ctx.name}.{host_name(router)}.mirror.nft"
            f.write_text(render_mirror(f"{ctx.table}_ids", devices, to_sensor[0]))
            apply_files(router, [RenderedFile(f, "nft")], "nft", ctx.plan.family)

    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        raise MechanismError(
            "ids applies to its routers and its sensor at once (apply_group)",
            where="mechanism ids",
        )

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        self.release_group([dut], ctx)

    def release_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        for name, d in list(self._daemons.items()):
            stop_matcher(d, {"engine": "ids", "host": name, "variant": ctx.name})
        self._daemons.clear()

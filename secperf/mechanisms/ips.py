"""Intrusion prevention inline (`ips`): every packet through the host is inspected
before it passes.

Document 004 §V measured a router's IPS inline (every packet inspected before it is
forwarded) and in promiscuous mode (secperf.mechanisms.ids). Suricata and Snort are
not packaged on secperf's platform, so the real parts are:

- engine "nfq": every forwarded packet goes to `secperf-nfq` on NFQUEUE (`-j
  NFQUEUE` without `--queue-bypass`: without the daemon nothing passes, fail
  closed), which matches its payload against the rule file's signatures with
  Hyperscan; a matching `drop` rule gets a drop verdict, `alert` rules count.
  `queues = N` spreads the flows over N queues (`--queue-balance`), one daemon
  thread each; `fail_open = true` adds `--queue-bypass` (no daemon: accept) and has
  a full queue accept uninspected instead of drop. The engine's control connection
  passes beside the queue (secperf.mechanisms.nfq.control_bypass).
- engine "fwsnort": Debian's fwsnort translates the same rule file into iptables
  string-match rules (LOG for every rule, DROP after the LOG for `drop` rules), run
  inside the DUT namespace with every file in the run directory, and loaded with
  iptables-nft-restore: matching in the kernel.

Each release appends the engine's counters (packets, alerts, drops, per sid; the
kernel's queue overflows) as one JSON line to `<name>.<host>.ips-stats.jsonl` in
the run's files directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PlainValidator, ValidationInfo, model_validator

from secperf import ips_rules
from secperf.errors import MechanismError
from secperf.mechanisms import nfq
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    apply_files,
    backend_tools,
)
from secperf.mechanisms.capabilities import Counts, Detector
from secperf.schema.fields import bounded, rule_file_or_count
from secperf.schema.units import parse_size
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.tools import Tool

READY_TIMEOUT_S = 30.0
FWSNORT_TOOL = Tool("fwsnort", "fwsnort", 'mechanism ips with engine = "fwsnort"')


def _rules_or_sweep(value: object, info: ValidationInfo) -> Path | int | list[int]:
    """A rule file, a count, or a list of counts (a rule-count sweep)."""
    if not isinstance(value, list | tuple):
        return rule_file_or_count(value, info)
    if not value:
        raise ValueError("a sweep list needs at least one value")
    counts: list[int] = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"item {i}: a rule-count sweep lists numbers of rules to generate")
        rule_file_or_count(item, info)  # the bounds check
        counts.append(item)
    if len(set(counts)) != len(counts):
        raise ValueError("a rule-count sweep lists each count once")
    return counts


RulesSweep = Annotated[Path | int | list[int], PlainValidator(_rules_or_sweep)]
ReassemblyBytes = Annotated[
    int, PlainValidator(bounded(parse_size, 64, 64 * 1024**2, "a reassembly bound"))
]
PendingBytes = Annotated[
    int, PlainValidator(bounded(parse_size, 0, 64 * 1024**2, "a bound on held segments"))
]


class IpsSpec(MechanismSpec):
    """Intrusion prevention inline (document 004 §V): every packet through the host is
    matched against a Snort-subset rule file before it passes. `engine = "nfq"`:
    secperf-nfq on NFQUEUE with Hyperscan (user space, fail closed); `"fwsnort"`: the
    same rules as iptables string matches (kernel). `rules` is a file or a count of
    rules to generate (rule-count sweeps take a list)."""

    sweepable: ClassVar[tuple[str, ...]] = ("rules",)

    kind: Literal["ips"] = "ips"
    engine: Literal["nfq", "fwsnort"] = "nfq"
    """`nfq`: every packet through the host goes to `secperf-nfq` on NFQUEUE, which matches its
    payload with Hyperscan (user space); `fwsnort`: Debian's fwsnort turns the same rules into
    iptables string-match rules (kernel).
    """
    rules: RulesSweep = Path("rules/secperf-attacks.rules")
    """A rule file in the Snort/Suricata subset of docs/studies/004.md "IPS rule files" (relative
    to the scenario, or to the checkout for the shipped file), or a number of rules to generate
    (`secperf.ips_rules.generate_rules`); a list of numbers is a rule-count sweep (one variant
    per count, `name[rules=N]`, as the ACL's `rules`).
    """
    mode: Literal["inline"] = "inline"
    """The IPS sits in the path (the mirror is `kind = "ids"`)."""
    queue: int = Field(default=0, ge=0, le=65535)
    """The NFQUEUE number (`engine = "nfq"`), the first of `queues`."""
    # engine nfq: queues queue .. queue+queues-1 (--queue-balance), a daemon thread each
    queues: int = Field(default=1, ge=1, le=64)
    """`engine = "nfq"`: queues `queue` … `queue + queues − 1` (`--queue-balance`: the kernel
    spreads flows over them by a hash of their addresses, a flow stays on one), one secperf-nfq
    thread each, sharing the compiled rules.
    """
    # engine nfq: --queue-bypass (no daemon: accept) and a full queue accepts uninspected
    fail_open: bool = False
    """`engine = "nfq"`: `--queue-bypass` on the rule (no daemon bound: packets pass uninspected)
    and a full queue accepts new packets uninspected (NFQA_CFG_F_FAIL_OPEN) instead of dropping
    them; the default fails closed.
    """
    # Bounded per-flow TCP reassembly (engine nfq): a pattern split across segments
    # matches; `reassembly_bytes` of each flow direction, `reassembly_flows` at once,
    # and `reassembly_pending` bytes of each held out of order until their gap fills.
    reassembly: bool = False
    """Bounded per-flow TCP reassembly in secperf-nfq (`engine = "nfq"` only): a pattern split
    across segments of one flow direction matches.
    """
    reassembly_bytes: ReassemblyBytes = 1024**2
    """Bytes of each flow direction matched as one stream; later bytes are matched packet by
    packet.
    """
    reassembly_flows: int = Field(default=4096, ge=1, le=1_000_000)
    """Flow directions reassembled at once; a flow beyond it is matched packet by packet."""
    reassembly_pending: PendingBytes = 64 * 1024
    """Bytes of each flow direction held out of order (segments that arrived ahead of a gap) until
    the gap fills; 0: nothing held, a gap restarts the flow's stream.
    """

    @model_validator(mode="after")
    def _reassembly_needs_nfq(self) -> IpsSpec:
        if self.reassembly and self.engine != "nfq":
            raise ValueError(
                'reassembly = true needs engine = "nfq" (fwsnort matches each packet alone)'
            )
        for key, default in (("queues", 1), ("fail_open", False)):
            if getattr(self, key) != default and self.engine != "nfq":
                raise ValueError(
                    f'{key} needs engine = "nfq" (fwsnort matches in the kernel, no queue)'
                )
        if self.queue + self.queues - 1 > 65535:
            raise ValueError(f"queues {self.queue}..{self.queue + self.queues - 1}: past 65535")
        return self

    @property
    def rule_source(self) -> Path | int:
        """`rules` of an expanded entry (a file or one count, not a sweep)."""
        if isinstance(self.rules, list):
            raise MechanismError("a rule-count sweep must be expanded into variants first")
        return self.rules


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


def render_iptables(spec: IpsSpec, ctx: MechanismContext) -> str:
    """engine nfq: the engine's control connection past the queue, then every other
    packet of the chain to secperf-nfq."""
    chain = "INPUT" if ctx.hook == "input" else "FORWARD"
    s = spec
    how = "--queue-bypass (FAIL-OPEN)" if s.fail_open else "no --queue-bypass (fail closed)"
    queues = f"queues {s.queue}-{s.queue + s.queues - 1}" if s.queues > 1 else f"queue {s.queue}"
    return (
        f"# secperf ips (nfq): every {chain.lower()}ed packet to secperf-nfq on {queues}, "
        f"{how}; the engine's control connection (tcp port {ctx.plan.control_port}) "
        "passes beside the queue\n"
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        + "".join(f"{line}\n" for line in nfq.control_bypass(chain, ctx.plan))
        + f"-A {chain} -j {nfq.queue_target(s.queue, s.queues, s.fail_open)}\nCOMMIT\n"
    )


class Ips(Mechanism):
    spec: IpsSpec

    def __init__(self, spec: IpsSpec) -> None:
        super().__init__(spec)
        self._matchers: dict[str, nfq.Matcher] = {}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        src, js = nfq.write_rule_files(self.spec.rule_source, ctx)
        if self.spec.engine == "fwsnort":
            parsed = ips_rules.parse_rules(src)
            fw_in = ctx.files_dir / f"{ctx.name}.fwsnort.rules"
            fw_in.write_text(fwsnort_input(parsed, src.read_text()))
            # The .save file is written on the DUT by apply(): fwsnort probes iptables
            # where it runs, which must be the DUT's namespace.
            return [RenderedFile(ctx.files_dir / f"{ctx.name}.fwsnort.save", "iptables-restore")]
        ipt = ctx.files_dir / f"{ctx.name}.iptables"
        ipt.write_text(render_iptables(self.spec, ctx))
        return [RenderedFile(js, "ips-rules"), RenderedFile(ipt, "iptables-restore")]

    def backends(self) -> set[str]:
        return {"nft", "iptables-nft"}

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        if self.spec.engine == "fwsnort":
            self._apply_fwsnort(host, ctx)
            return
        # The daemon first: once the rule is in, every packet needs it.
        self.restart_daemons(host, ctx)
        ipt = [f for f in ctx.rendered if f.tool == "iptables-restore"]
        apply_files(host, ipt, "iptables-nft", ctx.plan.family)

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
        extra = {"engine": self.spec.engine, "host": nfq.host_name(dut), "variant": ctx.name}
        if self.spec.engine == "fwsnort":
            proc = dut.run(["iptables-nft-save", "-c"], check=False)
            record = {"event": "stopped", "mode": "fwsnort", **fwsnort_counters(proc.stdout)}
            with nfq.stats_paths(ctx, dut)[1].open("a") as f:
                f.write(json.dumps({**record, **extra}) + "\n")
            return
        m = self._matchers.pop(nfq.host_name(dut), None)
        if m is not None:
            nfq.stop_matcher(m, extra)

    # -- DaemonMechanism (secperf.mechanisms.daemons) -----------------------------------
    def daemons(self) -> list[ManagedProcess]:
        return [m.proc for m in self._matchers.values() if m.proc.poll() is None]

    def kill_daemons(self) -> list[str]:
        killed = nfq.kill([m.proc for m in self._matchers.values()])
        self._matchers.clear()
        return killed

    def restart_daemons(self, host: Host, ctx: MechanismContext) -> None:
        """Start (again) the matcher daemon alone; the NFQUEUE rule stays."""
        if self.spec.engine != "nfq":
            return
        s = self.spec
        js = ctx.files_dir / f"{ctx.name}.rules.json"
        argv = [*nfq.daemon_queue_args(s.queue, s.queues, s.fail_open), "--rules", str(js)]
        if s.reassembly:
            argv += [
                "--reassembly-bytes",
                str(s.reassembly_bytes),
                "--reassembly-flows",
                str(s.reassembly_flows),
                "--reassembly-pending",
                str(s.reassembly_pending),
            ]
        what = f"ips on queue {s.queue}" + (f" (+{s.queues - 1})" if s.queues > 1 else "")
        self._matchers[nfq.host_name(host)] = nfq.start_matcher(
            host, ctx, argv, what, READY_TIMEOUT_S
        )

    # -- what an attack mix asks -------------------------------------------------------
    def detector(self) -> Detector:
        return Detector(f"ips-{self.spec.engine}", blocks=True)

    def detection_counts(self, hosts: Sequence[Host], ctx: MechanismContext) -> Counts | None:
        host = hosts[0]
        if self.spec.engine == "fwsnort":
            out = host.run(["iptables-nft-save", "-c"], check=False).stdout
            c = fwsnort_counters(out)
            return {"by_sid": c["by_sid"], "drops": c["drops"], "packets": None}
        m = self._matchers.get(nfq.host_name(host))
        return None if m is None else nfq.snapshot(m, nfq.host_name(host))


def tools(spec: IpsSpec) -> list[Tool]:
    fw = [FWSNORT_TOOL] if spec.engine == "fwsnort" else []
    return [*backend_tools("iptables-nft"), *fw]


KIND = MechanismKind(
    name="ips",
    model=IpsSpec,
    runtime=Ips,
    # its NFQUEUE daemon started and its rules loaded before each test (the kept
    # seed004-ips-sweep run: about 1.2 s a test beyond its own length)
    apply_s=1.0,
    tools=tools,
    known_tools=(*backend_tools("iptables-nft"), FWSNORT_TOOL),
    run_check=nfq.built,
)

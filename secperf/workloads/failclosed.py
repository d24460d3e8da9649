"""Kind `failclosed`: does the DUT fail closed? Document 000's design claim, checked
with real traffic.

With the variant applied, probes open new TCP connections and UDP flows across
the DUT path only (the client's address on its DUT link, the server's on its DUT
link; never a `direct` baseline's wire):

1. `routes`: the client reaches the outside (the server's DUT-side address, its
   default route) only through the DUT, and the server reaches the client only
   through the DUT. A `direct` baseline's client–server link is the paper's PC
   without its appliance; it exists to measure that baseline, carries no default
   route, and these probes never use it (the detail names it).
2. `inside-out`: the client reaches the server (the answer says which source the
   server saw: the DUT's outside address under PAT).
3. `outside-in`: the server (and an attacker host, if the testbed has one) cannot
   open a connection or flow to the client.
4. `forwarding-off`: with the DUT's forwarding switched off, nothing passes either
   way; forwarding is restored.
5. `daemon-killed`: the variant's daemons (secperf.mechanisms.daemons) are
   SIGKILLed; no new connection passes either way; the daemons are restarted. A
   variant without daemons has nothing to kill: the check is not applicable and
   fails if new connections still pass, since nothing in that path can close it
   when a security process dies (a plain forwarding DUT, a plain ACL).
6. `vm-stopped` (only where the DUT host is a VM, secperf.testbed.hosts.vm): the VM is
   powered off (its qemu process ends); nothing passes either way; it boots again
   and the variant's mechanisms are loaded afresh.
7. `restored`: after all that, the inside reaches the outside again.

"Nothing passes" means no probe got an answer and the far echo server saw no
arrival. The result record (kept with ctx.keep) is
`{"type": "result", "kind": "failclosed", "passed": bool, "checks": [{"name",
"passed", "applicable", "detail", "probes": [...]}], ...}`; its metric `passed`
is 1 or 0.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, field_validator

from secperf.engine import Record
from secperf.mechanisms.daemons import DaemonMechanism
from secperf.metric import Metric, MetricRow
from secperf.schema.fields import bounded
from secperf.schema.units import parse_duration
from secperf.testbed.hosts import Power
from secperf.testbed.testbed import Host, Testbed
from secperf.testbed.topology import DUT, Topology
from secperf.workloads.base import MeasureContext, WorkloadKind, WorkloadPoint, WorkloadSpec
from secperf.workloads.parts.probe import EchoServer, Probe, ProbeResult, ProbeSet, start_echo

ProbeTimeout = Annotated[float, PlainValidator(bounded(parse_duration, 0.05, 10, "a timeout"))]


class FailclosedWorkload(WorkloadSpec):
    """Does the DUT fail closed? Real probes across the DUT path: the inside reaches
    the outside, the outside cannot open a connection to the inside, and nothing
    passes with forwarding off or with the mechanism's daemons killed.
    `duration` and `warmup` do not apply (each probe waits `timeout`)."""

    kind: Literal["failclosed"]
    # The engine's last data port: an ACL that permits the measured traffic permits it too.
    port: int = Field(default=5399, ge=1, le=65535)
    """The probes' TCP/UDP port (the engine's last data port, so an ACL that permits the measured
    traffic permits the probes too).
    """
    timeout: ProbeTimeout = 0.5
    """How long a probe waits for an answer."""

    @field_validator("port")
    @classmethod
    def _not_control(cls, value: int) -> int:
        if value == 5201:
            raise ValueError("port 5201 is the engine server's control port; pick another")
        return value

    def default_name(self) -> str:
        return "failclosed"


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    applicable: bool = True
    probes: list[ProbeResult] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "applicable": self.applicable,
            "detail": self.detail,
            "probes": [p.as_json() for p in self.probes],
        }


@dataclass
class DutPath:
    """The addresses of the DUT path and the hosts on each side."""

    family: int
    client: str  # the client's address on its DUT link
    server: str  # the server's address on its DUT link
    outside: list[str]  # roles outside the DUT: server, attacker
    port: int
    timeout: float


def _forwarding_keys(family: int) -> list[str]:
    return ["net.ipv4.ip_forward"] if family == 4 else ["net.ipv6.conf.all.forwarding"]


def _sysctl(host: Host, key: str) -> str:
    return host.run(["sysctl", "-n", key]).stdout.strip()


def _route_get(host: Host, addr: str) -> dict[str, Any]:
    out = host.run(["ip", "-j", "route", "get", addr], check=False)
    if out.returncode != 0:
        return {}
    routes = json.loads(out.stdout or "[]")
    return dict(routes[0]) if routes else {}


def _routes(host: Host, family: int) -> list[dict[str, Any]]:
    out = host.run(["ip", "-j", f"-{family}", "route", "show"], check=False)
    return list(json.loads(out.stdout or "[]")) if out.returncode == 0 else []


def check_routes(tb: Testbed, topo: Topology, path: DutPath) -> Check:
    """The client's way out and the outside's way in both go through the DUT."""
    fam = path.family
    problems: list[str] = []
    notes: list[str] = []
    client_gw = topo.gateway("client", fam)
    client_if = tb.ifname("client-dut", "client")
    got = _route_get(tb.host("client"), path.server)
    if got.get("gateway") != client_gw or got.get("dev") != client_if:
        problems.append(
            f"client reaches {path.server} via {got.get('gateway') or 'on-link'} dev "
            f"{got.get('dev')}, not via the dut ({client_gw} dev {client_if})"
        )
    for route in _routes(tb.host("client"), fam):
        gw = route.get("gateway")
        if gw is not None and gw != client_gw:
            problems.append(f"client route {route.get('dst')} via {gw} bypasses the dut")
        if gw is None and route.get("dev") != client_if and route.get("dst") != "default":
            notes.append(f"{route.get('dst')} on {route.get('dev')}")
    for role in path.outside:
        gw = topo.gateway(role, fam)
        got = _route_get(tb.host(role), path.client)
        if gw is None or got.get("gateway") != gw:
            problems.append(
                f"{role} reaches the client {path.client} via "
                f"{got.get('gateway') or 'on-link'}, not via the dut ({gw})"
            )
    detail = (
        f"client {path.client} reaches the outside only via the dut ({client_gw}); "
        f"{' and '.join(f'the {r}' for r in path.outside)} "
        f"{'reaches' if len(path.outside) == 1 else 'reach'} the client only via the dut"
    )
    if notes:
        direct = topo.link_between("client", "server")
        what = (
            " (the `direct` baseline's wire: the paper's PC without its appliance; "
            "no default route uses it and these probes never do)"
            if direct is not None
            else ""
        )
        detail += f"; besides the dut link the client has only {'; '.join(notes)}{what}"
    if problems:
        return Check("routes", False, "; ".join(problems))
    return Check("routes", True, detail)


def _arrivals(echos: dict[str, EchoServer], before: dict[str, int]) -> dict[str, int]:
    return {role: len(e.seen()) - before.get(role, 0) for role, e in echos.items()}


def _both_ways(path: DutPath) -> ProbeSet:
    ps = ProbeSet()
    for proto in ("tcp", "udp"):
        ps.probes.append(Probe("client", path.server, path.port, proto, path.timeout))
        for role in path.outside:
            ps.probes.append(Probe(role, path.client, path.port, proto, path.timeout))
    return ps


def _nothing_passes(
    hosts: dict[str, Host], echos: dict[str, EchoServer], path: DutPath
) -> tuple[bool, list[ProbeResult], str]:
    """Probe both ways; (nothing passed, results, what passed in words)."""
    before = {role: len(e.seen()) for role, e in echos.items()}
    results = _both_ways(path).run(hosts)
    arrived = _arrivals(echos, before)
    leaks = [f"{r.probe.proto} {r.probe.src}→{r.probe.addr}" for r in results if r.answered] + [
        f"{n} arrival(s) at the {role}" for role, n in arrived.items() if n > 0
    ]
    return not leaks, results, ", ".join(leaks)


def run_checks(ctx: MeasureContext, port: int, timeout: float) -> list[Check]:
    tb, topo, fam = ctx.testbed, ctx.topology, ctx.family
    outside = ["server"] + (["attacker"] if "attacker" in topo.roles else [])
    path = DutPath(
        family=fam,
        client=topo.address("client", "client-dut", fam),
        server=topo.server_address(fam, "dut"),
        outside=outside,
        port=port,
        timeout=timeout,
    )
    hosts = {role: tb.host(role) for role in ("client", *outside)}
    dut = tb.host(DUT)
    anywhere = "::" if fam == 6 else "0.0.0.0"
    echos: dict[str, EchoServer] = {}
    try:
        for role in ("client", "server"):
            echos[role] = start_echo(tb.host(role), anywhere, [port])
        checks = [check_routes(tb, topo, path)]
        checks.append(_inside_out(hosts, path, "inside-out"))
        checks.append(_outside_in(hosts, echos, path))
        checks.append(_forwarding_off(dut, hosts, echos, path))
        checks.append(_daemon_killed(ctx, dut, hosts, echos, path))
        if dut.power is not None:
            checks.append(_vm_stopped(ctx, dut.power, hosts, echos, path))
        checks.append(_inside_out(hosts, path, "restored"))
        return checks
    finally:
        for echo in echos.values():
            echo.stop()


def _inside_out(hosts: dict[str, Host], path: DutPath, name: str) -> Check:
    ps = ProbeSet(
        [Probe("client", path.server, path.port, p, path.timeout) for p in ("tcp", "udp")]
    )
    results = ps.run(hosts)
    ok = all(r.answered for r in results)
    seen = sorted({r.answer for r in results if r.answer})
    what = "after the checks, " if name == "restored" else ""
    if ok:
        detail = (
            f"{what}the client reaches {path.server} over tcp and udp; "
            f"the server sees it as {', '.join(seen)}"
        )
    else:
        failed = [r.probe.proto for r in results if not r.answered]
        detail = f"{what}the client cannot reach {path.server} over {', '.join(failed)}"
    return Check(name, ok, detail, probes=results)


def _outside_in(hosts: dict[str, Host], echos: dict[str, EchoServer], path: DutPath) -> Check:
    before = len(echos["client"].seen())
    ps = ProbeSet(
        [
            Probe(role, path.client, path.port, proto, path.timeout)
            for role in path.outside
            for proto in ("tcp", "udp")
        ]
    )
    results = ps.run(hosts)
    arrived = len(echos["client"].seen()) - before
    leaked = [f"{r.probe.proto} from the {r.probe.src}" for r in results if r.answered]
    ok = not leaked and arrived == 0
    if ok:
        detail = f"no new tcp/udp connection from {', '.join(path.outside)} reaches the client"
    else:
        detail = (
            f"the outside opens connections to the client {path.client}: "
            f"{', '.join(leaked) or 'none answered'}; {arrived} arrival(s) at the client"
        )
    return Check("outside-in", ok, detail, probes=results)


def _forwarding_off(
    dut: Host, hosts: dict[str, Host], echos: dict[str, EchoServer], path: DutPath
) -> Check:
    keys = _forwarding_keys(path.family)
    saved = {k: _sysctl(dut, k) for k in keys}
    for k, v in saved.items():  # put back by teardown (and a lab host's watchdog) too
        dut.track_setting("/proc/sys/" + k.replace(".", "/"), v)
    try:
        dut.run(["sysctl", "-q", "-w", *(f"{k}=0" for k in keys)])
        ok, results, leaks = _nothing_passes(hosts, echos, path)
    finally:
        dut.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in saved.items())])
    detail = (
        "with forwarding off in the dut nothing passes either way"
        if ok
        else f"with forwarding off in the dut these still pass: {leaks}"
    )
    return Check("forwarding-off", ok, detail + f" ({', '.join(keys)} restored)", probes=results)


def _daemon_killed(
    ctx: MeasureContext,
    dut: Host,
    hosts: dict[str, Host],
    echos: dict[str, EchoServer],
    path: DutPath,
) -> Check:
    owners = [
        (mech, mctx)
        for mech, mctx in ctx.mechanisms
        if isinstance(mech, DaemonMechanism) and mech.daemons()
    ]
    if not owners:
        ok, results, leaks = _nothing_passes(hosts, echos, path)
        detail = "no daemon to kill (not applicable): " + (
            f"new connections pass with no daemon in the path ({leaks}), so nothing here "
            "closes the path when a security process dies: fail-open"
            if not ok
            else "and nothing new passes anyway"
        )
        return Check("daemon-killed", ok, detail, applicable=False, probes=results)
    killed: list[str] = []
    try:
        for mech, _ in owners:
            assert isinstance(mech, DaemonMechanism)
            killed += mech.kill_daemons()
        ok, results, leaks = _nothing_passes(hosts, echos, path)
    finally:
        for mech, mctx in owners:
            assert isinstance(mech, DaemonMechanism)
            mech.restart_daemons(dut, mctx)
    detail = (
        f"with {', '.join(killed)} SIGKILLed no new connection passes either way (restarted)"
        if ok
        else f"with {', '.join(killed)} SIGKILLed new connections still pass: {leaks} "
        "(fail-open; restarted)"
    )
    return Check("daemon-killed", ok, detail, probes=results)


def _vm_stopped(
    ctx: MeasureContext,
    power: Power,
    hosts: dict[str, Host],
    echos: dict[str, EchoServer],
    path: DutPath,
) -> Check:
    """The DUT is a VM: power it off (qemu ends), nothing may pass either way (its
    links are bridged to taps that nothing reads now); boot it again and load the
    variant's mechanisms afresh."""
    t0 = time.monotonic()
    try:
        power.off()
        ok, results, leaks = _nothing_passes(hosts, echos, path)
    finally:
        power.on()
        for mech, mctx in ctx.mechanisms:
            for name in mctx.hosts:
                mech.apply(ctx.testbed.host(name), mctx)
    detail = (
        "with the VM stopped (qemu ended) nothing passes either way"
        if ok
        else f"with the VM stopped these still pass: {leaks}"
    )
    detail += f" (booted again and the variant reloaded in {time.monotonic() - t0:.0f} s)"
    return Check("vm-stopped", ok, detail, probes=results)


def result_record(ctx: MeasureContext, checks: list[Check], port: int) -> Record:
    passed = all(c.passed for c in checks)
    return {
        "type": "result",
        "kind": "failclosed",
        "variant": ctx.variant,
        "family": ctx.family,
        "port": port,
        "passed": passed,
        "checks_passed": sum(c.passed for c in checks),
        "checks_total": len(checks),
        "failed": [c.name for c in checks if not c.passed],
        "checks": [c.as_json() for c in checks],
    }


@dataclass(frozen=True)
class FailclosedExecutor:
    """Runs the checks above as one measurement of a `failclosed` point."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[FailclosedWorkload]) -> Record:
        port, timeout = point.spec.port, point.spec.timeout
        record = result_record(ctx, run_checks(ctx, port, timeout), port)
        ctx.keep(record)
        return record


FAILCLOSED = Metric("passed", "Fail-closed checks passed", "1/0", True, True)

METRICS: tuple[MetricRow, ...] = (
    # 1 when every check of the record passed
    (FAILCLOSED, lambda r: 1.0 if r.get("passed") is True else 0.0),
)

KIND = WorkloadKind(
    name="failclosed",
    model=FailclosedWorkload,
    executor=FailclosedExecutor(),
    metrics=METRICS,
    checks=True,
)

"""Intrusion detection on a mirror (`ids`): a copy of the traffic inspected beside
the path (document 004 §V, promiscuous mode).

The routers in `on` (the DUT by default) duplicate every packet that enters them
(nft netdev `dup to`, on the ingress of each of their interfaces but the one to the
sensor) to the host with role "ids" in `on`, where `secperf-nfq --packet-socket`
matches the copies against the rule file (the same matcher as the inline IPS,
secperf.mechanisms.ips) and only counts. The forwarded packets are untouched.

Each release appends the sensor's counters (packets, alerts per sid, its own socket
drops) as one JSON line to `<name>.<host>.ips-stats.jsonl` in the run's files
directory.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PlainValidator

from secperf.errors import MechanismError
from secperf.mechanisms import nfq
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    Placement,
    RenderedFile,
    apply_files,
    backend_tools,
)
from secperf.mechanisms.capabilities import Counts, Detector
from secperf.schema.fields import rule_file_or_count
from secperf.testbed.hosts import Host

READY_TIMEOUT_S = 30.0
SENSOR_ROLE = "ids"


class IdsSpec(MechanismSpec):
    """Intrusion detection on a mirror (004 §V, promiscuous mode): the routers in `on`
    copy every packet they receive (nft netdev dup) to the host with role "ids" in
    `on`, where secperf-nfq reads a packet socket and only alerts."""

    on: Placement = Field(default_factory=lambda: ["dut", SENSOR_ROLE])
    """The routers that mirror, and the sensor: the one host with role `ids`."""
    kind: Literal["ids"] = "ids"
    rules: Annotated[Path | int, PlainValidator(rule_file_or_count)] = Path(
        "rules/secperf-attacks.rules"
    )
    """The same rule file."""
    # False: the mirror alone, nobody listening on the sensor (its kernel drops the
    # copies): what the copy costs the router, apart from what the sensor's matching
    # costs a machine whose CPUs it shares.
    sensor: bool = True
    """`false`: the mirror alone, nobody reads the copies (the sensor host's kernel drops them):
    what the copy costs the router, apart from the sensor's matching.
    """


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


class Ids(Mechanism):
    """`on` names the hosts that mirror (default the DUT) and the sensor (a host with
    role "ids"); they are applied at once (apply_group)."""

    spec: IdsSpec

    def __init__(self, spec: IdsSpec) -> None:
        super().__init__(spec)
        self._matchers: dict[str, nfq.Matcher] = {}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        _src, js = nfq.write_rule_files(self.spec.rules, ctx)
        return [RenderedFile(js, "ips-rules")]

    def backends(self) -> set[str]:
        return {"nft"}

    def _split(self, hosts: Sequence[Host], ctx: MechanismContext) -> tuple[list[Host], Host]:
        topo = ctx.topology
        sensors = [
            h for h in hosts if topo is not None and topo.host(nfq.host_name(h)).role == SENSOR_ROLE
        ]
        if len(sensors) != 1 or len(hosts) < 2:
            raise MechanismError(
                f"ids on {[nfq.host_name(h) for h in hosts]}: needs the mirroring hosts and "
                'exactly one host with role "ids"',
                where="mechanism ids, key on",
                fix='write on = ["dut", "ids"] (the default) with an ids host in the testbed',
            )
        return [h for h in hosts if h is not sensors[0]], sensors[0]

    def apply_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        routers, sensor = self._split(hosts, ctx)
        sensor_addrs = _addresses(sensor)
        if len(sensor_addrs) != 1:
            raise MechanismError(
                f"the ids host {nfq.host_name(sensor)} has {len(sensor_addrs)} interfaces: "
                "expected one",
                where=nfq.host_name(sensor),
                fix="link the ids host to the one router that mirrors to it",
            )
        sensor_if, sensor_addr = sensor_addrs[0]
        sensor_net = ipaddress.ip_interface(sensor_addr).network
        js = ctx.files_dir / f"{ctx.name}.rules.json"
        if self.spec.sensor:
            self._matchers[nfq.host_name(sensor)] = nfq.start_matcher(
                sensor,
                ctx,
                ["--packet-socket", sensor_if, "--rules", str(js)],
                "ids sensor",
                READY_TIMEOUT_S,
            )
        for router in routers:
            addrs = _addresses(router)
            to_sensor = [d for d, a in addrs if ipaddress.ip_interface(a).network == sensor_net]
            if not to_sensor:
                raise MechanismError(
                    f"{nfq.host_name(router)} has no link to the ids host {nfq.host_name(sensor)}",
                    where=nfq.host_name(router),
                    fix="link the ids host to the router that mirrors",
                )
            devices = sorted({d for d, _ in addrs} - set(to_sensor))
            f = ctx.files_dir / f"{ctx.name}.{nfq.host_name(router)}.mirror.nft"
            f.write_text(render_mirror(f"{ctx.table}_ids", devices, to_sensor[0]))
            apply_files(router, [RenderedFile(f, "nft")], "nft", ctx.plan.family)

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        raise MechanismError(
            "ids applies to its routers and its sensor at once (apply_group)",
            where="mechanism ids",
        )

    def release(self, host: Host, ctx: MechanismContext) -> None:
        self.release_group([host], ctx)

    def release_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        for name, m in list(self._matchers.items()):
            nfq.stop_matcher(m, {"engine": "ids", "host": name, "variant": ctx.name})
        self._matchers.clear()

    # -- what an attack mix asks -------------------------------------------------------
    def detector(self) -> Detector | None:
        if not self.spec.sensor:
            return None  # a mirror nobody reads detects nothing
        return Detector("ids", blocks=False)  # a mirror never blocks

    def detection_counts(self, hosts: Sequence[Host], ctx: MechanismContext) -> Counts | None:
        for name, m in self._matchers.items():
            return nfq.snapshot(m, name)  # the one sensor
        return None


KIND = MechanismKind(
    name="ids",
    model=IdsSpec,
    runtime=Ids,
    # the mirror: nft netdev dup
    known_tools=tuple(backend_tools("nft")),
    sensor_role=SENSOR_ROLE,
    hosts=frozenset({SENSOR_ROLE}),
    run_check=nfq.built,
)

"""Mechanisms built from the scenario's mechanism entries (`from_schema`).

Apart from the package's __init__ so that importing secperf.mechanisms does not
import the scenario schema (whose workload kinds import mechanisms)."""

from __future__ import annotations

from secperf.errors import MechanismError
from secperf.mechanisms.acl import Acl
from secperf.mechanisms.appliance import Appliance
from secperf.mechanisms.base import Mechanism
from secperf.mechanisms.custom import Custom
from secperf.mechanisms.external import External
from secperf.mechanisms.fastpath import Fastpath
from secperf.mechanisms.ips import Ids, Ips
from secperf.mechanisms.nat import Nat
from secperf.mechanisms.proxy import Proxy
from secperf.mechanisms.synproxy import Synproxy
from secperf.mechanisms.tunnel import Tunnel
from secperf.scenario.schema import (
    AclMechanism,
    ApplianceMechanism,
    CustomMechanism,
    ExternalMechanism,
    FastpathMechanism,
    IdsMechanism,
    IpsMechanism,
    NatMechanism,
    ProxyMechanism,
    SynproxyMechanism,
    VpnMechanism,
)
from secperf.scenario.schema import Mechanism as MechanismSpec
from secperf.testbed.ssh import SshSpec

__all__ = ["Mechanism", "from_schema"]


def from_schema(spec: MechanismSpec) -> Mechanism:
    """The runnable mechanism for one `mechanisms = [...]` entry of a variant."""
    if isinstance(spec, AclMechanism):
        if isinstance(spec.rules, list):
            raise MechanismError(
                "a rule-count sweep must be expanded into variants first (Variant.expand)"
            )
        return Acl(
            rules=spec.rules,
            layout=spec.layout,
            entries=spec.entries,
            match=spec.match,
            backend=spec.backend,
            stateful=spec.stateful,
            exclude_one=spec.exclude_one,
            flood_permit=spec.flood_permit,
        )
    if isinstance(spec, CustomMechanism):
        return Custom(file=spec.file, format=spec.format, backend=spec.backend)
    if isinstance(spec, NatMechanism):
        return Nat(mode=spec.mode, backend=spec.backend, pool_size=spec.pool_size)
    if isinstance(spec, ApplianceMechanism):
        return Appliance(queue=spec.queue, nat=spec.nat, fail_open=spec.fail_open)
    if isinstance(spec, SynproxyMechanism):
        return Synproxy(
            mss=spec.mss, wscale=spec.wscale, timestamp=spec.timestamp, sack_perm=spec.sack_perm
        )
    if isinstance(spec, VpnMechanism):
        return Tunnel(spec)
    if isinstance(spec, ProxyMechanism):
        return Proxy(
            rules=spec.rules,
            match=spec.match,
            dns_lookups=spec.dns_lookups,
            cache=spec.cache,
            logging=spec.logging,
            cpus=spec.cpus,
            memory=spec.memory,
            deny=list(spec.deny),
            level=spec.level,
        )
    if isinstance(spec, IpsMechanism):
        if isinstance(spec.rules, list):
            raise MechanismError(
                "a rule-count sweep must be expanded into variants first (Variant.expand)"
            )
        return Ips(
            engine=spec.engine,
            rules=spec.rules,
            mode=spec.mode,
            queue=spec.queue,
            reassembly_bytes=spec.reassembly_bytes if spec.reassembly else 0,
            reassembly_flows=spec.reassembly_flows,
        )
    if isinstance(spec, FastpathMechanism):
        return Fastpath()
    if isinstance(spec, IdsMechanism):
        return Ids(rules=spec.rules)
    if isinstance(spec, ExternalMechanism):
        m = spec.manager
        manager = (
            None
            if m is None
            else SshSpec(
                name="manager",
                host=m.ansible_host,
                user=m.ansible_user,
                port=m.ansible_port,
                key_file=m.ansible_ssh_private_key_file,
                known_hosts=m.known_hosts,
                host_key_checking=m.host_key_checking,
            )
        )
        return External(apply_cmd=spec.apply, remove_cmd=spec.remove, manager=manager)
    raise MechanismError(f"mechanism kind {spec.kind!r} is not implemented yet")

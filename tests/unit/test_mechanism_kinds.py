"""The mechanism registry and what each kind declares: the data the runner, the
preflight and the workloads read instead of naming kinds."""

from __future__ import annotations

from typing import Any, Literal, get_args

import pytest
from pydantic import ValidationError

from secperf.errors import MechanismError, ScenarioError
from secperf.mechanisms.acl import AclSpec
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
)
from secperf.mechanisms.capabilities import Detecting
from secperf.mechanisms.registry import MECHANISMS
from secperf.plan import topology_for
from secperf.plan.graph import build_topology
from secperf.plan.placement import placement_hook
from secperf.scenario.scenario import Scenario, Variant
from secperf.schema.registry import KindRegistry
from secperf.testbed.hosts import Host


def scenario(*mechanisms: dict[str, Any]) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "variants": {"v": {"mechanisms": list(mechanisms)}},
            "workloads": [{"kind": "rr"}],
        },
        context={"check_files": False},
    )


def test_every_kind_is_its_models_literal_and_builds_its_runtime() -> None:
    assert MECHANISMS.names() == [
        "acl",
        "custom",
        "ruleset",
        "nat",
        "appliance",
        "synproxy",
        "vpn",
        "proxy",
        "tls_inspect",
        "ips",
        "ids",
        "fastpath",
        "rps",
        "external",
    ]
    minimal: dict[str, dict[str, Any]] = {
        "acl": {"rules": 1},
        "custom": {"file": "x.nft", "format": "nft"},
        "ruleset": {"file": "x.nft"},
        "nat": {"mode": "pat"},
        "vpn": {"implementation": "wireguard"},
        "rps": {"cpus": "0"},
    }
    for kind in MECHANISMS:
        assert get_args(kind.model.model_fields["kind"].annotation) == (kind.name,)
        (spec,) = (
            scenario({"kind": kind.name, **minimal.get(kind.name, {})}).variants["v"].mechanisms
        )
        assert type(spec) is kind.model and MECHANISMS.of(spec) is kind
        mech = kind.build(spec)
        assert isinstance(mech, Mechanism) and mech.kind == kind.name and mech.spec is spec
        assert {t.program for t in kind.tools_for(spec)} <= {t.program for t in kind.known_tools}


def test_what_the_kinds_declare_is_what_the_code_branched_on() -> None:
    def having(pred: Any) -> set[str]:
        return {k.name for k in MECHANISMS if pred(k)}

    assert having(lambda k: k.filters) == {"acl", "custom", "ruleset", "appliance"}
    assert having(lambda k: isinstance(k.runtime, type) and issubclass(k.runtime, Detecting)) == {
        "ips",
        "ids",
    }
    assert having(lambda k: k.forwarding_only) == {
        "nat",
        "appliance",
        "synproxy",
        "fastpath",
        "proxy",
        "tls_inspect",
    }
    assert having(lambda k: k.sensor_role is not None) == {"ids"}
    assert having(lambda k: k.hosts) == {"ids"}
    assert having(lambda k: k.single is not None) == {"acl"}
    assert having(lambda k: k.kernel_check is not None) == {"custom", "ruleset"}
    assert having(lambda k: k.rule_sets is not None) == {"ruleset"}
    assert having(lambda k: k.run_check is not None) == {"appliance", "ips", "ids"}


def test_a_sweep_is_expanded_before_its_runtime_is_built() -> None:
    spec = AclSpec(rules=[1, 10])
    with pytest.raises(MechanismError, match="expanded into variants first"):
        MECHANISMS.of(spec).build(spec)
    expanded = Variant.model_validate({"mechanisms": [{"kind": "acl", "rules": [1, 10]}]})
    names = [name for name, _m, _s in expanded.expand("acl")]
    assert names == ["acl[rules=1]", "acl[rules=10]"]
    for _name, (one,), _swept in expanded.expand("acl"):
        assert MECHANISMS.of(one).build(one).spec.rules in (1, 10)


def test_a_single_kind_appears_once_in_a_variant_others_compose() -> None:
    with pytest.raises(
        ValidationError, match=r'mechanisms\[0\] and mechanisms\[2\] are both kind = "acl"'
    ):
        Variant.model_validate(
            {
                "mechanisms": [
                    {"kind": "acl", "rules": 1},
                    {"kind": "nat", "mode": "pat"},
                    {"kind": "acl", "rules": 2},
                ]
            }
        )
    two = Variant.model_validate(
        {"mechanisms": [{"kind": "nat", "mode": "pat"}, {"kind": "nat", "mode": "static"}]}
    )
    assert [m.kind for m in two.mechanisms] == ["nat", "nat"]


def test_the_kinds_placement_decides_the_hook_and_the_testbed() -> None:
    ids = MECHANISMS.get("ids")
    plain = scenario({"kind": "ips", "rules": 10})
    with_ids = scenario({"kind": "ids"})
    assert "ids" not in topology_for(plain, []).roles
    topo = topology_for(with_ids, [])
    # the sensor does not count: the mirroring DUT forwards, so the hook is "forward"
    assert placement_hook(topo, ids, ("dut", "ids"), where="x") == "forward"
    with pytest.raises(ScenarioError, match="mechanism proxy needs a host that forwards"):
        placement_hook(build_topology(plain), MECHANISMS.get("proxy"), ("server",), where="x")


# -- the registry --------------------------------------------------------------------------


class ToySpec(MechanismSpec):
    kind: Literal["toy"] = "toy"
    size: int = 1


class Toy(Mechanism):
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        return []

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        return None


TOY = MechanismKind(name="toy", model=ToySpec, runtime=Toy)


def test_a_kind_registered_later_validates_with_errors_inside_its_entry() -> None:
    entry = {"kind": "toy", "size": "big"}
    with pytest.raises(ValidationError, match="toy"):
        Variant.model_validate({"mechanisms": [entry]})  # not registered yet
    with MECHANISMS.registered(TOY):
        assert "toy" in MECHANISMS
        (toy,) = Variant.model_validate({"mechanisms": [{"kind": "toy"}]}).mechanisms
        assert isinstance(toy, ToySpec) and MECHANISMS.of(toy) is TOY
        with pytest.raises(ValidationError) as info:
            Variant.model_validate({"mechanisms": [entry]})
        assert info.value.errors()[0]["loc"][-1] == "size"
    assert "toy" not in MECHANISMS


def test_the_registry_refuses_a_name_twice_and_a_model_of_another_name() -> None:
    reg: KindRegistry[MechanismKind[Any]] = KindRegistry("mechanism", [TOY])
    with pytest.raises(ValueError, match="registered already"):
        reg.register(TOY)
    with pytest.raises(ValueError, match='Literal\\["other"\\]'):
        reg.register(MechanismKind(name="other", model=ToySpec, runtime=Toy))
    with pytest.raises(KeyError, match="the known kinds are toy"):
        reg.get("nope")

"""Adding a kind is one module and one registry line: here a mechanism kind defined in
this file alone, registered for the test's duration, checked by `secperf check` as any
shipped kind is (tests/netns/test_add_a_mechanism_kind.py runs it through `secperf run`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from typer.testing import CliRunner

from secperf.cli import app
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    TrafficPlan,
    backend_tools,
    run_tool,
)
from secperf.mechanisms.registry import MECHANISMS
from secperf.testbed.hosts import Host

# -- the kind: one nft rule that counts the measured flow's packets ----------------------


class CounterSpec(MechanismSpec):
    """Counts the packets to `port` that cross its host (one nft rule, a named counter)."""

    kind: Literal["counter"] = "counter"
    port: int = Field(default=5201, ge=1, le=65535)  # the engine's control port


class Counter(Mechanism):
    spec: CounterSpec

    def __init__(self, spec: CounterSpec) -> None:
        super().__init__(spec)
        self._seen: list[tuple[Host, str]] = []

    @staticmethod
    def table(ctx: MechanismContext) -> str:
        return f"{ctx.table}_counter"

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.files_dir / f"{ctx.name}.nft"
        path.write_text(
            f"table inet {self.table(ctx)} {{\n"
            "  counter seen {}\n"
            f"  chain {ctx.hook} {{\n"
            f"    type filter hook {ctx.hook} priority filter; policy accept;\n"
            f'    tcp dport {self.spec.port} counter name "seen"\n'
            "  }\n"
            "}\n"
        )
        return [RenderedFile(path, "nft")]

    def backends(self) -> set[str]:
        return {"nft"}

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        for f in ctx.rendered:
            run_tool(host, ["nft", "-f", str(f.path)], what="nft -f", source=f.path)
        self._seen = [(host, self.table(ctx))]

    def observe(self) -> dict[str, Any] | None:
        """The packets the rule counted in the test just measured (loaded afresh for it)."""
        packets = 0
        for host, table in self._seen:
            out = host.run(["nft", "-j", "list", "counter", "inet", table, "seen"]).stdout
            for item in json.loads(out)["nftables"]:
                packets += int(item.get("counter", {}).get("packets", 0))
        return {"kind": self.kind, "packets": packets}


KIND = MechanismKind(
    name="counter",
    model=CounterSpec,
    runtime=Counter,
    known_tools=tuple(backend_tools("nft")),
)

SCENARIO = """name = "counted"

[repeat]
min = 2
max = 2
# one result per round: none measured again, no traced or attribution round
remeasure = 0
trace_softirq = false
attribution = false

[timing]
duration = "0.5s"
warmup = "0.1s"

[variants.counted]
mechanisms = [{{ kind = "counter", {key} = 5201 }}]

[[workloads]]
kind = "rr"
"""


def check(path: Path) -> Any:
    return CliRunner().invoke(app, ["check", str(path)])


def test_a_new_mechanism_kind_passes_secperf_check(tmp_path: Path) -> None:
    path = tmp_path / "counted.toml"
    path.write_text(SCENARIO.format(key="port"))
    with MECHANISMS.registered(KIND):
        result = check(path)
    assert result.exit_code == 0, result.output
    assert f"ok {path}: 1 variant(s) + baseline, 1 workload point(s)" in " ".join(
        result.output.split()
    )
    # Without its registry line the kind does not exist: the same file is refused.
    result = check(path)
    assert result.exit_code != 0
    assert "unknown kind 'counter'" in result.output


def test_a_new_mechanism_kind_names_a_typo_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text(SCENARIO.format(key="prot"))
    with MECHANISMS.registered(KIND):
        result = check(path)
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert f"{path}:16:" in text, text  # the line of the mechanism entry
    assert "variants.counted.mechanisms[0].prot: unknown key 'prot'" in text, text
    assert "did you mean 'port'?" in text, text


def test_a_new_mechanism_kind_renders_its_rule(tmp_path: Path) -> None:
    spec = CounterSpec(port=5300)
    mech = KIND.build(spec)
    plan = TrafficPlan(4, "198.18.1.2/32", "198.18.2.2/32", "198.18.1.2", "198.18.2.2")
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="counted.0", table="secperf_t")
    (rendered,) = mech.render(ctx)
    text = rendered.path.read_text()
    assert 'tcp dport 5300 counter name "seen"' in text
    assert "table inet secperf_t_counter" in text and "hook forward" in text

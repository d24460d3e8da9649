"""The user's own rule set, loaded as written.

The file is checked with the tool's own parser (`nft -c -f`, `iptables-restore
--test`) before anything runs, so a typo is reported with the tool's file and line
instead of surfacing halfway through a measurement.
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from secperf.errors import MechanismError, ScenarioError, ToolMissingError
from secperf.mechanisms.base import (
    IPTABLES_TOOLS,
    CheckContext,
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    apply_files,
    backend_tools,
)
from secperf.mechanisms.dut_counters import METRICS as COUNTER_METRICS
from secperf.mechanisms.dut_counters import Observer
from secperf.testbed.hosts import Host
from secperf.tools import Tool


class CustomSpec(MechanismSpec):
    """A rule file the user wrote, loaded as is on the DUT."""

    kind: Literal["custom"] = "custom"
    file: Path = Field(strict=False)
    """Relative to the scenario file's directory, or absolute."""
    format: Literal["nft", "iptables"]
    """`nft -f` syntax or `iptables-restore` syntax."""
    backend: Literal["iptables-legacy", "iptables-nft"] = "iptables-nft"
    """For `format = "iptables"`: which iptables loads it."""
    # After each test, a `mechanism` record of what the DUT counted over it: the
    # file's named nft counters and the DUT's IP forwarding, fragmentation and
    # reassembly counters (secperf.mechanisms.dut_counters; RFC 3511 §5.9).
    counters: bool = False
    """After each test, a `mechanism` record of what the DUT counted over it: the file's named nft
    counters (`counter NAME { }`, used as `counter name NAME`) and the DUT's /proc/net/snmp IP
    counters (forwarded, reassembled, fragmented); the summary shows `dut_ip_forwarded`,
    `dut_ip_reasm_ok`, `dut_ip_reasm_fails`, `dut_ip_frag_creates` beside the workload's figures
    (docs/data-format.md). RFC 3511 §5.9 uses it (`scenarios/rfc3511-frag-*.nft`).
    """

    @field_validator("file")
    @classmethod
    def _resolve(cls, value: Path, info: ValidationInfo) -> Path:
        # Relative to the scenario file (the loader passes its directory).
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get("base_dir")
        resolved = value if value.is_absolute() else Path(base or Path.cwd()) / value
        if context.get("check_files", True) and not resolved.is_file():
            raise ValueError(f"rule file {str(value)!r} not found (looked for {resolved})")
        return resolved

    @property
    def loader(self) -> str:
        """The backend that loads the file."""
        return "nft" if self.format == "nft" else self.backend


class Custom(Mechanism):
    spec: CustomSpec

    def __init__(self, spec: CustomSpec) -> None:
        super().__init__(spec)
        self._counts = Observer() if spec.counters else None

    def backends(self) -> set[str]:
        return {self.spec.loader}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        nft = self.spec.format == "nft"
        copy = ctx.files_dir / f"{ctx.name}{'.nft' if nft else '.iptables'}"
        shutil.copyfile(self.spec.file, copy)
        return [RenderedFile(copy, "nft" if nft else "iptables-restore")]

    def check_argv(self, family: int) -> list[str]:
        if self.spec.format == "nft":
            return ["nft", "-c", "-f", str(self.spec.file)]
        return [IPTABLES_TOOLS[(self.spec.backend, family)][1], "--test", str(self.spec.file)]

    def check(self, family: int, dut: Host | None = None) -> None:
        """Parse the file with its own tool; a dry run, it changes nothing.

        Without a DUT (`secperf check`) the dry run happens in the current namespace:
        both `nft -c` and `iptables-restore --test` only ask the kernel, never commit.
        """
        argv = self.check_argv(family)
        if shutil.which(argv[0]) is None:
            raise ToolMissingError(
                f"{argv[0]} is not installed, so {self.spec.file} cannot be checked",
                fix="run `secperf doctor` to see how to install it",
            )
        if dut is None:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        else:
            proc = dut.run(argv, check=False, timeout=60)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            # a bad rule file is bad input: `secperf check` exits 3 (docs/ci-example.md)
            raise ScenarioError(
                f"{argv[0]} rejects the rule set:\n{detail}",
                where=str(self.spec.file),
                fix="correct the line the tool names (run the command above to retry by hand)",
            )

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        apply_files(host, ctx.rendered, self.spec.backend, ctx.plan.family)
        if self._counts is not None:
            self._counts.start(host)

    def observe(self) -> dict[str, Any] | None:
        """With `counters`: the file's named counters and the DUT's IP counters over
        the test just measured."""
        observed = self._counts.observe() if self._counts is not None else None
        return None if observed is None else {"kind": self.kind, **observed}


# iptables' own verdicts, and the target extensions of Debian's xtables (iptables 1.8).
IPTABLES_TARGETS = frozenset(
    [
        "ACCEPT",
        "DROP",
        "RETURN",
        "QUEUE",
        "AUDIT",
        "CHECKSUM",
        "CLASSIFY",
        "CLUSTERIP",
        "CONNMARK",
        "CONNSECMARK",
        "CT",
        "DNAT",
        "DNPT",
        "DSCP",
        "ECN",
        "HL",
        "HMARK",
        "IDLETIMER",
        "LED",
        "LOG",
        "MARK",
        "MASQUERADE",
        "NETMAP",
        "NFLOG",
        "NFQUEUE",
        "NOTRACK",
        "RATEEST",
        "REDIRECT",
        "REJECT",
        "SECMARK",
        "SET",
        "SNAT",
        "SNPT",
        "SYNPROXY",
        "TCPMSS",
        "TCPOPTSTRIP",
        "TEE",
        "TOS",
        "TPROXY",
        "TRACE",
        "TTL",
        "ULOG",
    ]
)
XTABLES_DIRS = (Path("/usr/lib/x86_64-linux-gnu/xtables"), Path("/usr/lib/xtables"))
_TARGET_OPT = re.compile(r"(?:^|\s)(?:-j|--jump|-g|--goto)\s+(\S+)")
_CHAIN_OPT = re.compile(r"^(?:-A|--append|-I|--insert|-R|--replace)\s+(\S+)")


def _installed_targets() -> set[str]:
    names: set[str] = set()
    for d in XTABLES_DIRS:
        if d.is_dir():
            for f in d.glob("lib*_*.so"):
                name = f.stem.split("_", 1)[1]
                if name.isupper():
                    names.add(name)
    return names


def check_iptables_targets(path: Path) -> None:
    """Every `-j`/`-g` target of an iptables-restore file is a chain the file declares
    in that table or a target iptables knows. `iptables-restore --test` does not check
    this (a misspelt `-j DORP` passes as a jump to a chain), and the load fails only
    on the DUT, after the testbed is built."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MechanismError(
            f"cannot read the rule file: {exc.strerror}", where=str(path)
        ) from None
    known = IPTABLES_TARGETS | _installed_targets()
    chains: dict[str, set[str]] = {}
    table = "filter"
    uses: list[tuple[int, str, str, str]] = []  # line, table, chain, target
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            table = line[1:].strip()
            chains.setdefault(table, set())
        elif line.startswith(":"):
            chains.setdefault(table, set()).add(line[1:].split()[0])
        elif m := re.match(r"^(?:-N|--new-chain)\s+(\S+)", line):
            chains.setdefault(table, set()).add(m.group(1))
        elif (c := _CHAIN_OPT.match(line)) and (t := _TARGET_OPT.search(line)):
            uses.append((number, table, c.group(1), t.group(1)))
    for number, tbl, chain, target in uses:
        if target in known or target in chains.get(tbl, set()):
            continue
        close = [k for k in sorted(known | chains.get(tbl, set())) if _near(target, k)]
        hint = (
            f"did you mean {close[0]}?"
            if close
            else (
                f"declare the chain (`:{target} - [0:0]` or `-N {target}`) in *{tbl}, "
                "or use a target such as ACCEPT, DROP, REJECT or RETURN"
            )
        )
        raise ScenarioError(
            f"-A {chain} jumps to {target!r}, which is neither a chain of table {tbl} "
            "in this file nor an iptables target (iptables-restore --test does not catch this)",
            where=f"{path}:{number}",
            fix=hint,
        )


def _near(a: str, b: str) -> bool:
    return difflib.SequenceMatcher(None, a.upper(), b.upper()).ratio() >= 0.6


def check(spec: CustomSpec, ctx: CheckContext) -> None:
    """What needs no root: every iptables jump goes somewhere."""
    if spec.format == "iptables":
        check_iptables_targets(spec.file)


def kernel_check(spec: CustomSpec, ctx: CheckContext) -> None:
    """The file through its own tool's parser (a dry run that commits nothing)."""
    Custom(spec).check(ctx.family)


def tools(spec: CustomSpec) -> list[Tool]:
    return backend_tools(spec.loader)


KIND = MechanismKind(
    name="custom",
    model=CustomSpec,
    runtime=Custom,
    tools=tools,
    known_tools=tuple(backend_tools("nft", "iptables-legacy", "iptables-nft")),
    filters=True,
    check=check,
    kernel_check=kernel_check,
    kernel_check_note="rule files NOT checked by nft -c / iptables-restore --test",
    # with `counters = true`: what the DUT counted over each test
    metrics=COUNTER_METRICS,
)

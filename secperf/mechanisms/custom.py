"""The user's own rule set, loaded as written.

The file is checked with the tool's own parser (`nft -c -f`, `iptables-restore
--test`) before anything runs, so a typo is reported with the tool's file and line
instead of surfacing halfway through a measurement.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from secperf.errors import MechanismError, ToolMissingError
from secperf.mechanisms.acl import apply_files
from secperf.mechanisms.base import IPTABLES_TOOLS, MechanismContext, RenderedFile
from secperf.testbed.testbed import Host


@dataclass(frozen=True)
class Custom:
    file: Path
    format: Literal["nft", "iptables"] = "nft"
    backend: Literal["iptables-legacy", "iptables-nft"] = "iptables-nft"
    kind: str = "custom"

    def backends(self) -> set[str]:
        return {"nft"} if self.format == "nft" else {self.backend}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        suffix = ".nft" if self.format == "nft" else ".iptables"
        copy = ctx.files_dir / f"{ctx.name}{suffix}"
        shutil.copyfile(self.file, copy)
        return [RenderedFile(copy, "nft" if self.format == "nft" else "iptables-restore")]

    def check_argv(self, family: int) -> list[str]:
        if self.format == "nft":
            return ["nft", "-c", "-f", str(self.file)]
        return [IPTABLES_TOOLS[(self.backend, family)][1], "--test", str(self.file)]

    def check(self, family: int, dut: Host | None = None) -> None:
        """Parse the file with its own tool; a dry run, it changes nothing.

        Without a DUT (`secperf check`) the dry run happens in the current namespace:
        both `nft -c` and `iptables-restore --test` only ask the kernel, never commit.
        """
        argv = self.check_argv(family)
        if shutil.which(argv[0]) is None:
            raise ToolMissingError(
                f"{argv[0]} is not installed, so {self.file} cannot be checked",
                fix="run `secperf doctor` to see how to install it",
            )
        if dut is None:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        else:
            proc = dut.run(argv, check=False, timeout=60)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            raise MechanismError(
                f"{argv[0]} rejects the rule set:\n{detail}",
                where=str(self.file),
                fix="correct the line the tool names (run the command above to retry by hand)",
            )

    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        apply_files(dut, ctx.rendered, self.backend, ctx.plan.family)

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        """Rules only: nothing to stop."""

"""`kind = "external"`: a variant of a device secperf does not configure itself.

With `apply` and `remove`, secperf runs those shell commands to switch the device
to the variant and back: on this machine, or over SSH on a management host
(`manager`, Ansible-style keys), with SECPERF_VARIANT and SECPERF_HOST in their
environment. Without them, secperf stops at every change and asks the person at
the terminal to make it; with no terminal (CI, a pipe) it refuses before any
traffic, since nobody could answer.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.base import MechanismContext, RenderedFile
from secperf.testbed.hosts import Host
from secperf.testbed.hosts.ssh_transport import SshSpec, connect, remote_run


def _variant(ctx: MechanismContext) -> str:
    return ctx.name.rsplit(".", 1)[0]


@dataclass
class External:
    apply_cmd: str | None = None
    remove_cmd: str | None = None
    manager: SshSpec | None = None
    kind: str = "external"
    _client: Any = field(default=None, repr=False)

    def backends(self) -> set[str]:
        return set()  # nothing secperf resets: the remove command (or the user) does

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        if self.apply_cmd is None and not sys.stdin.isatty():
            raise MechanismError(
                f"variant {_variant(ctx)} changes an external device by hand, and secperf "
                "is not at a terminal: nobody could make the change when asked",
                where=f"variants.{_variant(ctx)}.mechanisms (kind external)",
                fix="run secperf in a terminal, or give apply and remove commands that "
                "make the change",
            )
        return []

    def _run(self, cmd: str, what: str, dut: Host, ctx: MechanismContext) -> None:
        env = {"SECPERF_VARIANT": _variant(ctx), "SECPERF_HOST": dut.name}
        where = f"variants.{_variant(ctx)}.mechanisms (kind external) {what}"
        if self.manager is None:
            import os

            proc = subprocess.run(
                ["sh", "-c", cmd],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, **env},
                check=False,
            )
        else:
            if self._client is None:
                self._client = connect(self.manager)
            prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            got = remote_run(
                self._client, f"{prefix} sh -c {shlex.quote(cmd)}", timeout=300, where=where
            )
            proc = subprocess.CompletedProcess(cmd, got.returncode, got.stdout, got.stderr)
        if proc.returncode != 0:
            raise MechanismError(
                f"the {what} command failed (exit {proc.returncode}): {cmd}\n"
                f"  {(proc.stderr or proc.stdout).strip()[-1000:]}",
                where=where,
                fix=f"run the {what} command by hand to see why",
            )

    def _ask(self, text: str) -> None:
        print(f"\n>>> {text}, then press Enter (Ctrl-C stops the run)", flush=True)
        sys.stdin.readline()

    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        if self.apply_cmd is not None:
            self._run(self.apply_cmd, "apply", dut, ctx)
        else:
            self._ask(f"configure {dut.name} as variant {_variant(ctx)!r}")

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        if self.remove_cmd is not None:
            self._run(self.remove_cmd, "remove", dut, ctx)
        elif self.apply_cmd is None:
            self._ask(f"take variant {_variant(ctx)!r} off {dut.name} (back to its baseline)")

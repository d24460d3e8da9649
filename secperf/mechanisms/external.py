"""`kind = "external"`: a variant of a device secperf does not configure itself.

With `apply` and `remove`, secperf runs those shell commands to switch the device
to the variant and back: on this machine, or over SSH on a management host
(`manager`, Ansible-style keys), with SECPERF_VARIANT and SECPERF_HOST in their
environment. Without them, secperf stops at every change and asks the person at
the terminal to make it; with no terminal (CI, a pipe) it refuses before any
traffic, since nobody could answer.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import Any, Literal

from pydantic import Field, model_validator

from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
)
from secperf.schema.fields import StrictModel
from secperf.testbed.hosts import Host
from secperf.testbed.hosts.ssh_transport import SshSpec, connect, remote_run


class ManagementHost(StrictModel):
    """An SSH destination that runs an external device's commands (Ansible's names)."""

    ansible_host: str
    """The management address or DNS name the device's sshd answers on (never a test address)."""
    ansible_port: int = Field(default=22, ge=1, le=65535)
    """Sshd's port."""
    ansible_user: str = "root"
    """The login."""
    ansible_ssh_private_key_file: str | None = None
    """The private key; relative to the scenario file; absent: the ssh-agent's keys."""
    known_hosts: str | None = None
    """Host keys to trust (OpenSSH format); absent: ~/.ssh/known_hosts."""
    host_key_checking: bool = True
    """false: the host's key is trusted on first use and saved; a key that differs from the saved
    one is refused.
    """

    def ssh_spec(self) -> SshSpec:
        return SshSpec(
            name="manager",
            host=self.ansible_host,
            user=self.ansible_user,
            port=self.ansible_port,
            key_file=self.ansible_ssh_private_key_file,
            known_hosts=self.known_hosts,
            host_key_checking=self.host_key_checking,
        )


class ExternalSpec(MechanismSpec):
    """A variant of a device secperf does not configure: `apply` / `remove` shell
    commands (here, or on `manager` over SSH), else the user is asked at each change."""

    kind: Literal["external"] = "external"
    apply: str | None = None
    """Puts the variant on the device (run before every test of the variant); `SECPERF_VARIANT` and
    `SECPERF_HOST` are set.
    """
    remove: str | None = None
    """Takes it off again (after every test); give both or neither."""
    manager: ManagementHost | None = None
    """An SSH host that runs the commands: `ansible_host`, `ansible_port`, `ansible_user`,
    `ansible_ssh_private_key_file`, `known_hosts`, `host_key_checking`.
    """

    @model_validator(mode="after")
    def _both_or_neither(self) -> ExternalSpec:
        if (self.apply is None) != (self.remove is None):
            raise ValueError(
                "give apply and remove together (the commands that put the variant on "
                "the device and take it off), or neither (secperf then asks the user)"
            )
        if self.manager is not None and self.apply is None:
            raise ValueError("manager runs the apply / remove commands: give them too")
        return self


def _variant(ctx: MechanismContext) -> str:
    return ctx.name.rsplit(".", 1)[0]


class External(Mechanism):
    """Nothing secperf resets (no backends): the remove command, or the user, does."""

    spec: ExternalSpec

    def __init__(self, spec: ExternalSpec) -> None:
        super().__init__(spec)
        self._client: Any = None

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        if self.spec.apply is None and not sys.stdin.isatty():
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
        manager = self.spec.manager
        if manager is None:
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
                self._client = connect(manager.ssh_spec())
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

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        if self.spec.apply is not None:
            self._run(self.spec.apply, "apply", host, ctx)
        else:
            self._ask(f"configure {host.name} as variant {_variant(ctx)!r}")

    def release(self, host: Host, ctx: MechanismContext) -> None:
        if self.spec.remove is not None:
            self._run(self.spec.remove, "remove", host, ctx)
        elif self.spec.apply is None:
            self._ask(f"take variant {_variant(ctx)!r} off {host.name} (back to its baseline)")


KIND = MechanismKind(name="external", model=ExternalSpec, runtime=External)

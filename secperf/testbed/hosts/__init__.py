"""Hosts: the Host protocol (protocol.py) and its backends, one module each:
netns (a namespace here), ssh (a machine reached over SSH; its transport in
ssh_transport, its processes and watchdog in ssh_process, its work directory's check
in remote_workdir, the guard of its management session in mgmt_guard, its clean-up in
remote_teardown), vm (a namespace that can become a qemu VM), external (a device
secperf runs nothing on). registry.py lists them by name (each module's KIND says
what it is, as data). Adding one: docs/architecture.md.

Only the protocol's types are exported here; the Testbed imports the backends.
"""

from secperf.testbed.hosts.protocol import (
    Backend,
    BuildContext,
    Host,
    HostFactory,
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
)

__all__ = [
    "Backend",
    "BuildContext",
    "Host",
    "HostFactory",
    "InterfaceCounters",
    "ManagedProcess",
    "Power",
    "Redirect",
    "Switch",
]

"""The testbed: topology (the graph), ledger (what a run made), the hosts behind
their backends (hosts/), and the running thing (testbed.py)."""

from secperf.testbed.hosts.protocol import Host, ManagedProcess
from secperf.testbed.ledger import Ledger
from secperf.testbed.testbed import Testbed, clean, install_teardown_handlers, new_prefix
from secperf.testbed.topology import HostSpec, LinkSpec, Topology, check_testbed_address

__all__ = [
    "Host",
    "HostSpec",
    "Ledger",
    "LinkSpec",
    "ManagedProcess",
    "Testbed",
    "Topology",
    "check_testbed_address",
    "clean",
    "install_teardown_handlers",
    "new_prefix",
]

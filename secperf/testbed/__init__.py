"""The namespace testbed: topology (the graph), ledger (what a run made), and the running thing."""

from secperf.testbed.ledger import Ledger
from secperf.testbed.netns import Host, ManagedProcess, NetnsHost, new_prefix
from secperf.testbed.testbed import Testbed, clean, install_teardown_handlers
from secperf.testbed.topology import HostSpec, LinkSpec, Topology, check_testbed_address

__all__ = [
    "Host",
    "HostSpec",
    "Ledger",
    "LinkSpec",
    "ManagedProcess",
    "NetnsHost",
    "Testbed",
    "Topology",
    "check_testbed_address",
    "clean",
    "install_teardown_handlers",
    "new_prefix",
]

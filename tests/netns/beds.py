"""The bed most namespace tests share: the standard testbed with the engine's server
listening on its server host, on the engine's own ports (secperf.engine).

A module builds it once (a module-scoped fixture) and its tests share it:

    @pytest.fixture(scope="module")
    def bed(tmp_path_factory):
        with engine_bed(tmp_path_factory, Topology.standard(attacker=True)) as pair:
            yield pair
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, DATA_PORTS, EngineServer, start_server
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

# The standard plan's client and server addresses, and where the engine listens.
CLIENT = "198.18.1.2"
SERVER = "198.18.2.2"
ENGINE = f"{SERVER}:{CONTROL_PORT}"


@contextmanager
def engine_bed(
    tmp_path_factory: pytest.TempPathFactory, topology: Topology | None = None, **build: Any
) -> Iterator[tuple[Testbed, EngineServer]]:
    """`topology` (the standard one if None) built with its own state dir (`build`: more
    Testbed.build keywords), the engine serving on the server host; all gone after."""
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(topology or Topology.standard(), state_dir=state, **build) as tb:
        server = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
        try:
            yield tb, server
        finally:
            server.stop()

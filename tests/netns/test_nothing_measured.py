"""A test that moved nothing is an error, never a result of zeros: a UDP stream whose
every datagram the sending kernel refuses, through a real DUT."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from secperf.engine import CONTROL_PORT, EngineServer, run_test
from secperf.errors import EngineError
from secperf.testbed.testbed import Testbed
from secperf.workloads.base import engine_spec
from secperf.workloads.stream import StreamWorkload
from tests.netns.beds import engine_bed

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
CONTROL = CONTROL_PORT


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    with engine_bed(tmp_path_factory) as pair:
        yield pair


def udp_spec(message: int, socket_buffer: int) -> dict[str, object]:
    # built past the schema, which refuses a datagram above its buffer: the engine's
    # own refusal is what this tests
    udp = StreamWorkload.model_construct(
        kind="stream", protocol="udp", message=message, socket_buffer=socket_buffer
    )
    spec = engine_spec(udp)
    return {**spec, "server": f"{SERVER}:{CONTROL}", "duration": 0.5, "warmup": 0.2}


def test_a_udp_stream_the_kernel_refuses_is_an_error_not_0_mbit(
    bed: tuple[Testbed, EngineServer],
) -> None:
    tb, _ = bed
    # 60 KB datagrams leave a 1500-byte-MTU veth in ~41 fragments; a 4 KiB send buffer
    # (8 KiB in force) cannot hold them, so every send ends in ENOBUFS. Before, the
    # engine reported this as a result: 0 bit/s, loss ratio 0.
    with pytest.raises(EngineError, match="moved no traffic"):
        run_test(tb.host("client"), udp_spec(60000, 4096))


def test_the_same_stream_with_room_in_the_buffer_measures(
    bed: tuple[Testbed, EngineServer],
) -> None:
    tb, _ = bed
    r = run_test(tb.host("client"), udp_spec(60000, 262144)).result
    assert r["sender"]["messages"] > 0 and r["bits_per_second"] > 0
    assert 0.0 <= r["loss"]["ratio"] <= 1.0

"""Every record the engine prints fits its model in secperf/results/records.py, which
forbids undeclared fields: a field the engine gains (engine/secperf-engine/src/wire/
record.rs, or a kind's own JSON) without its model fails here.

The built engine runs each kind briefly on loopback in a network namespace of its own
(`unshare -n`: nothing leaves it, and it vanishes with the processes)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from secperf.results.records import (
    ENGINE_MODELS,
    ErrorRecord,
    FloodResult,
    FlowsServerResult,
    HttpResult,
    Result,
    engine_model,
    parse_engine_record,
)

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine" / "target" / "release" / "secperf-engine"
SERVER = "127.0.0.1:5201"

# One spec per record shape; short tests, interval records on.
SPECS: dict[str, dict[str, Any]] = {
    "stream-tcp": {"kind": "stream", "server": SERVER, "duration": 0.3, "warmup": 0.1},
    "stream-udp": {
        "kind": "stream",
        "protocol": "udp",
        "server": SERVER,
        "duration": 0.3,
        "warmup": 0.1,
        "rate_bps": 1_000_000,
    },
    "stream-bytes": {"kind": "stream", "server": SERVER, "bytes": 100_000, "warmup": 0},
    "rr-tcp": {"kind": "rr", "server": SERVER, "duration": 0.3, "warmup": 0.1},
    "rr-udp": {"kind": "rr", "protocol": "udp", "server": SERVER, "duration": 0.3, "warmup": 0.1},
    "crr": {"kind": "crr", "server": SERVER, "duration": 0.3, "warmup": 0.1},
    "latency": {"kind": "latency", "server": SERVER, "duration": 0.3, "warmup": 0.1},
    "connections": {"kind": "connections", "server": SERVER, "duration": 0.3, "connections": 50},
    # the engine's server is no web server: every fetch fails, the record's shape stands
    "http": {"kind": "http", "server": SERVER, "duration": 0.3, "warmup": 0.1},
    "flood": {
        "kind": "flood",
        "flood": "udp",
        "target": "198.18.0.2",
        "duration": 0.3,
        "rate_pps": 1000,
        "interval": 0.1,
    },
    # nothing listens on the mix's ports: each fetch fails to connect
    "mix": {
        "kind": "mix",
        "servers": [{"address": "198.18.0.2"}],
        "clients": [1, 2],
        "requests": 2,
        "timeout": 0.5,
        "html_files": [100],
        "ftp_files": [100],
    },
    "flows": {
        "kind": "flows",
        "duration": 0.3,
        "warmup": 0.1,
        "interval": 0.1,
        "flows": [
            {"protocol": "tcp", "src": "198.18.0.1", "dst": "198.18.0.2", "dport": 7000},
            {"protocol": "udp", "src": "198.18.0.1", "dst": "198.18.0.2", "dport": 7001},
            {"protocol": "icmp", "src": "198.18.0.1", "dst": "198.18.0.2"},
        ],
    },
    "bad-spec": {"kind": "stream", "server": SERVER, "message": 0},
}
FLOWS_SERVER = {
    "kind": "flows",
    "role": "server",
    "duration": 0.5,
    "allow": ["198.18.0.1"],
    "flows": [
        {"protocol": "tcp", "listen": "198.18.0.2", "port": 7000},
        {"protocol": "udp", "listen": "198.18.0.2", "port": 7001},
    ],
}

# Inside the namespace: loopback up with two testbed addresses, the engine's server,
# then each spec in turn; a server is waited for by polling its output (deadline 5 s).
SCRIPT = r"""
set -u
cd "$OUT"
ip link set lo up
ip addr add 198.18.0.1/32 dev lo
ip addr add 198.18.0.2/32 dev lo
wait_for() {  # FILE WORD: poll FILE until WORD appears, 5 s at most
    for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    return 1
}
"$ENGINE" serve --listen 127.0.0.1:5201 > serve.jsonl 2> serve.err &
serve=$!
wait_for serve.jsonl listening || exit 10
"$ENGINE" run --spec @flows-server.json > flows-server.jsonl 2>/dev/null &
flows=$!
wait_for flows-server.jsonl '"start"' || exit 11
for spec in spec-*.json; do
    "$ENGINE" run --spec @"$spec" > "${spec%.json}.jsonl" 2>/dev/null
done
kill -INT "$flows"; wait "$flows"
kill "$serve"; wait "$serve"
exit 0
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text("utf-8").splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every record each spec's run printed (and the servers'), by name."""
    if not ENGINE.is_file():
        pytest.skip("the engine is not built (make engine)")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip")
    out = tmp_path_factory.mktemp("engine-records")
    for name, spec in SPECS.items():
        (out / f"spec-{name}.json").write_text(json.dumps(spec), "utf-8")
    (out / "flows-server.json").write_text(json.dumps(FLOWS_SERVER), "utf-8")
    done = subprocess.run(
        ["unshare", "-n", "bash", "-c", SCRIPT],
        env={"OUT": str(out), "ENGINE": str(ENGINE), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no network namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, (done.returncode, done.stderr)
    records = {name: _lines(out / f"spec-{name}.jsonl") for name in SPECS}
    records["serve"] = _lines(out / "serve.jsonl")
    records["flows-server"] = _lines(out / "flows-server.jsonl")
    return records


def test_every_record_the_engine_prints_fits_its_model(
    printed: dict[str, list[dict[str, Any]]],
) -> None:
    seen: set[type] = set()
    for name, records in printed.items():
        assert records, f"{name}: the engine printed nothing"
        for record in records:
            model = parse_engine_record(record)  # ValidationError names the field
            seen.add(type(model))
            # nothing dropped on the way: the model gives back what the engine wrote
            assert model.model_dump(exclude_unset=True) == record, name
    # every model met a record (a model no engine record reaches would document nothing)
    assert seen == set(ENGINE_MODELS)


def test_each_test_ends_with_the_record_of_its_kind(
    printed: dict[str, list[dict[str, Any]]],
) -> None:
    last = {name: engine_model(records[-1]) for name, records in printed.items()}
    assert last["stream-tcp"] is Result and last["latency"] is Result
    assert last["flood"] is FloodResult and last["http"] is HttpResult
    assert last["flows-server"] is FlowsServerResult
    assert last["bad-spec"] is ErrorRecord
    latency = parse_engine_record(printed["latency"][-1])
    assert isinstance(latency, Result) and latency.c2s is not None  # its directions
    transfer = parse_engine_record(printed["stream-bytes"][-1])
    assert isinstance(transfer, Result) and transfer.transfer is not None


def test_a_field_the_model_lacks_is_refused(printed: dict[str, list[dict[str, Any]]]) -> None:
    from pydantic import ValidationError

    result = dict(printed["rr-tcp"][-1])
    result["new_field"] = 1
    with pytest.raises(ValidationError, match="new_field"):
        parse_engine_record(result)

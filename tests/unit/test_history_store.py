"""The results store (issue 45): every kept run imports, once; two processes writing at
once both land; a damaged store or one of another schema version is an error that says
what to do, and the file is left as it was."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from secperf.history.ingest import entry_of, parse_labels
from secperf.history.query import add_run_dir
from secperf.history.store import HistoryError, RunEntry, Store

ROOT = Path(__file__).resolve().parents[2]
KEPT = sorted(p for p in (ROOT / "docs" / "runs").iterdir() if p.is_dir())


@pytest.mark.parametrize("run_dir", KEPT, ids=[p.name for p in KEPT])
def test_every_kept_run_imports(tmp_path: Path, run_dir: Path) -> None:
    store = tmp_path / "h.sqlite"
    run_id, new = add_run_dir(run_dir, {"kept": "yes"}, store)
    assert new
    with Store.open(store) as st:
        (run,) = st.runs()
        rows = st.series_rows(run["scenario"])
    assert run["scenario"] and run["started"] and run["labels"] == {"kept": "yes"}
    assert rows, "every kept run has summary rows"
    assert {r["run_id"] for r in rows} == {run_id}
    assert any(r["verdict"] for r in rows if r["variant"] != "baseline") or all(
        r["degradation_pct"] is None for r in rows if r["variant"] != "baseline"
    )


def test_the_same_run_directory_twice_is_one_run(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    first = add_run_dir(ROOT / "docs" / "runs" / "quick", {"git": "a"}, store)
    again = add_run_dir(ROOT / "docs" / "runs" / "quick", {"ruleset": "r1"}, store)
    assert first[1] and not again[1] and first[0] == again[0]
    with Store.open(store) as st:
        (run,) = st.runs("quick")
        rows = st.series_rows("quick")
    assert run["labels"] == {"git": "a", "ruleset": "r1"}
    assert len(rows) == len(entry_of(ROOT / "docs" / "runs" / "quick").rows)


def test_the_machine_fingerprint_is_kept() -> None:
    run = entry_of(ROOT / "docs" / "runs" / "quick").run
    assert run["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert run["cpus"] == 2 and run["kernel"].startswith("6.18") and run["placement"] == "one"
    assert run["scenario_hash"] and run["status"] == "complete"


def _writer(store: str, name: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    rows = [{"variant": "v", "workload": "w", "point_id": f"w#{i}", "label": "w", "metric": "m",
             "degradation_pct": float(i)} for i in range(2000)]  # fmt: skip
    entry = RunEntry(
        run={"run_dir": f"/runs/{name}", "scenario": "s", "started": name, "fingerprint": "{}"},
        rows=rows,
    )
    with Store.open(store) as st:
        barrier.wait()
        st.add(entry)


def test_two_processes_writing_at_once_both_land(tmp_path: Path) -> None:
    store = str(tmp_path / "h.sqlite")
    Store.open(store).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(store, n, barrier)) for n in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store.open(store) as st:
        assert [r["run_dir"] for r in st.runs("s")] == ["/runs/a", "/runs/b"]
        assert len(st.series_rows("s")) == 4000


def test_a_damaged_store_is_an_error_and_left_alone(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    store.write_bytes(b"this is not a database" * 100)
    before = store.read_bytes()
    with pytest.raises(HistoryError) as err:
        Store.open(store)
    assert "not a readable secperf results store" in str(err.value)
    assert err.value.fix and "move the file aside" in err.value.fix
    assert store.read_bytes() == before


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    conn = sqlite3.connect(store)
    conn.execute("CREATE TABLE runs (id INTEGER)")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError) as err:
        Store.open(store)
    assert "schema version 7" in str(err.value) and err.value.fix


def test_no_store_when_reading_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(HistoryError) as err:
        Store.open(tmp_path / "none.sqlite", create=False)
    assert "history import" in (err.value.fix or "")
    assert not (tmp_path / "none.sqlite").exists()


def test_labels() -> None:
    assert parse_labels(["git=1a2b", "ruleset = big"]) == {"git": "1a2b", "ruleset": "big"}
    with pytest.raises(ValueError):
        parse_labels(["git"])

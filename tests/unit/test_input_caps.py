"""Inputs that would make secperf build or run without bound are refused when the
scenario is read (`secperf check`), with an error that says the cap and the fix
(issue 22, finding 10): a workload's file sets, a variant's sweep product. The
engine server's cap on concurrent tests is tested in the engine
(engine/secperf-engine/tests/guard.rs)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from secperf.errors import ScenarioError
from secperf.run.estimate import RECORDS_MAX_BYTES, records_estimate
from secperf.run.preflight import check_records
from secperf.scenario.scenario import MAX_VARIANT_SWEEP, MAX_WORKLOADS, Scenario
from secperf.schema.fields import FILE_SET_TOTAL_MAX


def scenario(workloads: list[dict[str, Any]], mechanisms: list[dict[str, Any]]) -> Scenario:
    return Scenario.model_validate(
        {"name": "t", "variants": {"v": {"mechanisms": mechanisms}}, "workloads": workloads}
    )


def refused(workloads: list[dict[str, Any]], mechanisms: list[dict[str, Any]]) -> str:
    with pytest.raises(ValidationError) as info:
        scenario(workloads, mechanisms)
    return str(info.value)


ACL = [{"kind": "acl", "rules": 10}]


def test_an_http_file_set_may_total_at_most_the_cap() -> None:
    assert FILE_SET_TOTAL_MAX == 1024**3
    fine = scenario([{"kind": "http", "files": ["512MiB", "511MiB"]}], ACL)
    assert sum(fine.workloads[0].files) < FILE_SET_TOTAL_MAX  # type: ignore[attr-defined]
    msg = refused([{"kind": "http", "files": ["1GiB", "512MiB", "1KiB"]}], ACL)
    assert "files total 1.5 GiB" in msg and "at most 1 GiB" in msg, msg


def test_a_mix_counts_its_three_file_sets_together() -> None:
    each = [f"{n}MiB" for n in range(200, 210)]  # ~2 GiB a set: each file is allowed alone
    msg = refused(
        [{"kind": "mix", "html_files": each[:2], "gif_files": each[2:4], "ftp_files": each[4:]}],
        ACL,
    )
    assert "html_files, gif_files and ftp_files total" in msg and "at most 1 GiB" in msg, msg


def test_a_variant_sweep_product_is_capped() -> None:
    assert MAX_VARIANT_SWEEP == 256
    ok = scenario([{"kind": "rr"}], [{"kind": "acl", "rules": list(range(1, 17))}])
    assert len(ok.variants["v"].expand("v")) == 16
    msg = refused([{"kind": "rr"}], [{"kind": "acl", "rules": list(range(1, 300))}])
    assert "expands into 299 variants" in msg and f"at most {MAX_VARIANT_SWEEP}" in msg, msg
    # Two swept mechanisms multiply: 20 x 20 = 400, though each list is short.
    both = [
        {"kind": "acl", "rules": list(range(1, 21))},
        {"kind": "ips", "rules": list(range(1, 21))},
    ]
    msg = refused([{"kind": "rr"}], both)
    assert "expands into 400 variants" in msg, msg


# -- issue 41: totals over the whole run ---------------------------------------------


def test_the_files_of_all_workloads_together_are_capped() -> None:
    """Each workload within its own 1 GiB, but they serve from the same roots."""
    ok = scenario([{"kind": "http", "name": "a", "files": ["300MiB", "300KiB"]}], ACL)
    assert sum(ok.workloads[0].file_sets()["files"]) < FILE_SET_TOTAL_MAX
    msg = refused(
        [
            {"kind": "http", "name": "a", "files": ["600MiB"]},
            {"kind": "mix", "name": "b", "html_files": ["500MiB"], "gif_files": ["1KiB"]},
        ],
        ACL,
    )
    assert "files total 1.1 GiB" in msg and "at most 1 GiB together" in msg, msg
    assert "fewer or smaller files" in msg, msg


def test_the_number_of_workloads_is_capped() -> None:
    assert MAX_WORKLOADS == 64
    many = [{"kind": "rr", "name": f"rr{i}"} for i in range(MAX_WORKLOADS)]
    assert len(scenario(many, ACL).workloads) == MAX_WORKLOADS
    msg = refused([*many, {"kind": "rr", "name": "one-more"}], ACL)
    assert f"65 workloads: a scenario may have at most {MAX_WORKLOADS}" in msg, msg
    assert "split it into scenarios" in msg, msg


def test_a_run_whose_records_could_outgrow_the_disk_cap_is_refused() -> None:
    """http interval records every 0.05 s for a week's budget: refused by `check`, with
    the interval floor that would fit; the same scenario at 1 s-a-record-free fits."""
    http = {
        "kind": "http",
        "duration": "600s",
        "validation": {"max_rate_deviation_pct": 10, "deviation_interval": 0.05},
    }
    week = {"budget": 7 * 86400, "max": 1000}
    noisy = Scenario.model_validate(
        {
            "name": "t",
            "repeat": week,
            "variants": {"v": {"mechanisms": ACL}},
            "workloads": [http],
        }
    )
    with pytest.raises(ScenarioError) as info:
        check_records(noisy)
    msg = str(info.value)
    assert f"at most {RECORDS_MAX_BYTES // 1024**3} GiB of records" in msg, msg
    floor = records_estimate(noisy).floor()
    assert 0.05 < floor < 60 and f"an interval of at least {floor:.2g} s" in msg, msg
    assert "lengthen the interval" in msg, msg
    quiet = noisy.model_copy(update={"workloads": [noisy.workloads[0].model_copy(
        update={"validation": None})]})  # fmt: skip
    check_records(quiet)  # no interval records: a week of tests fits
    assert records_estimate(quiet).bytes < RECORDS_MAX_BYTES

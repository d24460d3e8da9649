"""Inputs that would make secperf build or run without bound are refused when the
scenario is read (`secperf check`), with an error that says the cap and the fix
(issue 22, finding 10): a workload's file sets, a variant's sweep product. The
engine server's cap on concurrent tests is tested in the engine
(engine/secperf-engine/tests/guard.rs)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from secperf.scenario.scenario import MAX_VARIANT_SWEEP, Scenario
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

"""The `rps` mechanism's CPU lists and sysfs masks, and its schema's refusals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from secperf.mechanisms.rps import RpsSpec
from secperf.testbed.cgroups import parse_cpus
from secperf.testbed.placement import cpu_mask
from secperf.workloads.rfc2544.executor import cpu_mask as rfc2544_mask


@pytest.mark.parametrize(
    ("text", "cpus", "mask"),
    [
        ("0", [0], "1"),
        ("1", [1], "2"),
        ("0-1", [0, 1], "3"),
        ("0,2", [0, 2], "5"),
        ("4-7, 0", [0, 4, 5, 6, 7], "f1"),
        ("33", [33], "2,00000000"),
        ("0,32", [0, 32], "1,00000001"),
    ],
)
def test_cpu_lists_become_the_kernels_masks(text: str, cpus: list[int], mask: str) -> None:
    assert parse_cpus(text) == cpus
    assert cpu_mask(cpus) == mask
    assert rfc2544_mask(text) == mask  # a lab DUT's list, its CPUs not this machine's


@pytest.mark.parametrize("bad", ["", "a", "3-1", "0;1", "-1"])
def test_a_cpu_list_that_is_not_one_is_refused_with_the_form_expected(bad: str) -> None:
    with pytest.raises(ValidationError, match="cpus = "):
        RpsSpec(on="server", cpus=bad)

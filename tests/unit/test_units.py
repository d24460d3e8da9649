"""Sizes, rates and durations: what parses, what is refused, and round trips."""

from __future__ import annotations

import pytest

from secperf.schema.units import (
    fmt_duration,
    fmt_rate,
    fmt_size,
    parse_duration,
    parse_rate,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (1, 1),
        (0, 0),
        ("1", 1),
        ("1500B", 1500),
        ("4KB", 4000),
        ("4kb", 4000),
        ("16KiB", 16384),
        ("56KiB", 57344),
        ("1MiB", 1048576),
        ("1GiB", 1024**3),
        ("2MB", 2_000_000),
        ("1.5KiB", 1536),
        (" 32 KiB ", 32768),
        (2048.0, 2048),
    ],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("16 kilobytes", "expected a size"),
        ("16KiBs", "expected a size"),
        ("-1KiB", "expected a size"),
        (-5, "negative"),
        ("1.3B", "whole number"),
        (1.5, "whole number"),
        (True, "expected a size"),
        (None, "expected a size"),
        ([1], "expected a size"),
        ("", "expected a size"),
    ],
)
def test_parse_size_rejects(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_size(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100mbit", 100_000_000),
        ("1gbit", 1_000_000_000),
        ("33.6kbit", 33_600),
        ("10Mbit", 10_000_000),
        ("500bit", 500),
        (1_000_000, 1_000_000),
        ("unlimited", None),
        ("Unlimited", None),
        (None, None),
    ],
)
def test_parse_rate(text: object, expected: int | None) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("100mbps", "ambiguous"),
        ("10kbps", "ambiguous"),
        ("100MB", "ambiguous"),
        ("10kpps", "expected a rate"),
        ("fast", "expected a rate"),
        ("0mbit", "positive"),
        (0, "positive"),
        ("0.5bit", "whole number"),
        (False, "expected a rate"),
    ],
)
def test_parse_rate_rejects(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_rate(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (5, 5.0),
        (2.5, 2.5),
        ("5s", 5.0),
        ("500ms", 0.5),
        ("250us", 0.00025),
        ("1m", 60.0),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("0s", 0.0),
        ("1.5", 1.5),
    ],
)
def test_parse_duration(text: object, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("-5s", "negative"),
        (-1, "negative"),
        ("5 seconds", "expected a duration"),
        ("5d", "expected a duration"),
        (float("inf"), "expected a duration"),
        (True, "expected a duration"),
    ],
)
def test_parse_duration_rejects(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_duration(value)


@pytest.mark.parametrize(
    ("n", "text"),
    [(16384, "16KiB"), (1048576, "1MiB"), (1500, "1500B"), (1536, "1536B"), (1, "1B"), (0, "0B")],
)
def test_fmt_size_round_trips(n: int, text: str) -> None:
    assert fmt_size(n) == text
    assert parse_size(text) == n


@pytest.mark.parametrize(
    ("bps", "text"),
    [
        (None, "unlimited"),
        (100_000_000, "100mbit"),
        (1_000_000_000, "1gbit"),
        (33_600, "33.6kbit"),
        (999, "999bit"),
        (1_234_567, "1234.567kbit"),
        (1_234_567_891, "1234567.891kbit"),
    ],
)
def test_fmt_rate_round_trips(bps: int | None, text: str) -> None:
    assert fmt_rate(bps) == text
    assert parse_rate(text) == bps


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(5.0, "5s"), (0.5, "500ms"), (60.0, "1m"), (90.0, "90s"), (2.5, "2.5s"), (0.00025, "250us")],
)
def test_fmt_duration_round_trips(seconds: float, text: str) -> None:
    assert fmt_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)

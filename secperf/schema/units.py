"""Sizes, rates and durations as people write them in scenario files.

Sizes are bytes (`1500B`, `4KB` = 4000, `16KiB` = 16384); rates are bits per
second in tc's spelling (`100mbit`, `33.6kbit`, `unlimited`); durations are
seconds (`5s`, `500ms`, `1m`). A bare number is bytes, bits/s or seconds. The
parsers raise ValueError with a message that says what was expected, so
pydantic shows it as is; the formatters produce text the parsers read back.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# Plain decimals, and exponents as TOML writes them (`1e6` is a whole rate of 1000000).
_NUMBER = r"((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
_WITH_UNIT = re.compile(rf"^\s*{_NUMBER}\s*([a-zA-Z]*)\s*$")

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_RATE_UNITS: dict[str, int] = {
    "": 1,
    "bit": 1,
    "kbit": 1000,
    "mbit": 1000**2,
    "gbit": 1000**3,
    "tbit": 1000**4,
}
# tc's "bps" means bytes per second, everybody else's means bits: refuse both.
_AMBIGUOUS_RATE_UNITS = {"bps", "kbps", "mbps", "gbps", "tbps", "b", "kb", "mb", "gb"}
_DURATION_UNITS: dict[str, Decimal] = {
    "": Decimal(1),
    "us": Decimal("0.000001"),
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "min": Decimal(60),
    "h": Decimal(3600),
}

SIZE_EXAMPLES = "a size in bytes such as 1500, '1500B', '4KB' (4000), '16KiB' or '1MiB'"
RATE_EXAMPLES = "a rate in bits/s such as '100mbit', '1gbit', '33.6kbit' or 'unlimited'"
DURATION_EXAMPLES = "a duration such as 5 (seconds), '5s', '500ms' or '1m'"


def _split(text: str) -> tuple[Decimal, str] | None:
    match = _WITH_UNIT.match(text)
    if match is None:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        return None
    if not number.is_finite() or abs(number.adjusted()) > 30:
        return None  # 1e999 is no size, rate or duration anyone means
    return number, match.group(2).lower()


def toml_repr(value: object) -> str:
    """A value as the user wrote it in TOML: `true`, not `True`; `"5s"`; `nan`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return plain_number(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "'" not in value and "\n" not in value:
            return f"'{value}'"  # a TOML literal string
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_repr(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {toml_repr(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    return str(value)


def plain_number(x: float) -> str:
    """`2147483647`, `0.5`, `33.6`: never `2.14748e+09`."""
    if isinstance(x, int) or (math.isfinite(x) and float(x).is_integer()):
        return str(int(x))
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "0", "-0") else repr(x)


def _reject_non_number(value: object, expected: str) -> None:
    # bool is an int subclass; `true` is never a size.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected {expected}, got {toml_repr(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected {expected}, got {toml_repr(value)} (not a number)")


def parse_size(value: object) -> int:
    """Bytes from an int or a string with a unit (B, KB, MB, GB, KiB, MiB, GiB)."""
    _reject_non_number(value, SIZE_EXAMPLES)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative (got {value}); expected {SIZE_EXAMPLES}")
        return value
    if isinstance(value, float):
        if not value.is_integer() or value < 0:
            raise ValueError(f"expected a whole number of bytes, got {toml_repr(value)}")
        return int(value)
    assert isinstance(value, str)
    parts = _split(value)
    if parts is None or parts[1] not in _SIZE_UNITS:
        raise ValueError(f"expected {SIZE_EXAMPLES}, got {toml_repr(value)}")
    number, unit = parts
    total = number * _SIZE_UNITS[unit]
    if total != total.to_integral_value():
        raise ValueError(f"{toml_repr(value)} is not a whole number of bytes")
    return int(total)


def parse_rate(value: object) -> int | None:
    """Bits per second from an int or a tc-style string; 'unlimited' (or None) is None."""
    if value is None:
        return None
    _reject_non_number(value, RATE_EXAMPLES)
    if isinstance(value, str) and value.strip().lower() == "unlimited":
        return None
    if isinstance(value, int | float):
        number = Decimal(str(value))
        unit = ""
    else:
        assert isinstance(value, str)
        parts = _split(value)
        if parts is not None and parts[1] in _AMBIGUOUS_RATE_UNITS:
            raise ValueError(
                f"{toml_repr(value)} is ambiguous (bits or bytes?); "
                f"write the rate in bits/s with tc's units: kbit, mbit, gbit"
            )
        if parts is None or parts[1] not in _RATE_UNITS:
            raise ValueError(f"expected {RATE_EXAMPLES}, got {toml_repr(value)}")
        number, unit = parts
    bps = number * _RATE_UNITS[unit]
    if bps <= 0:
        raise ValueError(
            f"a rate must be positive (got {toml_repr(value)}); use 'unlimited' for no limit"
        )
    if bps != bps.to_integral_value():
        raise ValueError(f"{toml_repr(value)} is not a whole number of bits/s")
    return int(bps)


def parse_duration(value: object) -> float:
    """Seconds from a number or a string with a unit (us, ms, s, m, min, h)."""
    _reject_non_number(value, DURATION_EXAMPLES)
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"expected {DURATION_EXAMPLES}, got {toml_repr(value)}")
        seconds = Decimal(str(value))
    else:
        assert isinstance(value, str)
        stripped = value.strip()
        if stripped.startswith("-"):
            raise ValueError(f"a duration cannot be negative (got {toml_repr(value)})")
        parts = _split(stripped)
        if parts is None or parts[1] not in _DURATION_UNITS:
            raise ValueError(f"expected {DURATION_EXAMPLES}, got {toml_repr(value)}")
        seconds = parts[0] * _DURATION_UNITS[parts[1]]
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative (got {toml_repr(value)})")
    return float(seconds)


def _trim(number: float) -> str:
    """Up to three decimals, no trailing zeros: 33.6, 1, 0.125."""
    text = f"{number:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def fmt_size(n: int) -> str:
    """`16KiB`, `1MiB`, `1500B`: binary units only when exact, so the text parses back."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def fmt_rate(bps: int | None) -> str:
    """`100mbit`, `33.6kbit`, `unlimited` (None)."""
    if bps is None:
        return "unlimited"
    for unit, factor in (("tbit", 1000**4), ("gbit", 1000**3), ("mbit", 1000**2), ("kbit", 1000)):
        if bps >= factor:
            value = Decimal(bps) / factor
            # Keep only exact short forms, otherwise fall through to a smaller unit.
            if value == Decimal(_trim(float(value))):
                return f"{_trim(float(value))}{unit}"
    return f"{bps}bit"


def fmt_duration(seconds: float) -> str:
    """`5s`, `500ms`, `2m`, `250us`."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds >= 1 or seconds == 0:
        return f"{_trim(seconds)}s"
    ms = seconds * 1000
    if ms >= 1:
        return f"{_trim(ms)}ms"
    return f"{_trim(seconds * 1_000_000)}us"


def human_size(n: float) -> str:
    """`2 GiB`, `64 MiB`, `1500 B`: for error text (plain notation, with the unit)."""
    if float(n).is_integer():
        for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
            if n >= factor and n % factor == 0:
                return f"{int(n // factor)} {unit}"
        if n >= 2**31 - 1 and n < 2**31:
            return f"{int(n)} B (2 GiB - 1)"
    return f"{plain_number(n)} B"


def human_duration(seconds: float) -> str:
    """`1 ms`, `600 s`, `250 us`: for error text."""
    if seconds == 0 or seconds >= 1:
        return f"{plain_number(seconds)} s"
    if seconds >= 0.001:
        return f"{plain_number(seconds * 1000)} ms"
    return f"{plain_number(seconds * 1_000_000)} us"

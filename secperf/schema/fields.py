"""Value types of the scenario file: the parsers and bounds every section shares.

A key's type says what the file may hold and how it reads ("16KiB", "100mbit",
"5s", a list for a sweep); each kind's model (secperf/mechanisms/*, secperf/
workloads/*) and each section (testbed, repeat) builds its keys from these.
Every error names the bound and the value it got.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationInfo,
)

from secperf import ips_rules
from secperf.errors import MechanismError
from secperf.schema.units import (
    fmt_duration,
    fmt_rate,
    fmt_size,
    human_duration,
    human_size,
    parse_duration,
    parse_rate,
    parse_size,
    plain_number,
    toml_repr,
)

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_POINTS_PER_WORKLOAD = 1000
UDP_MAX_PAYLOAD = 65507  # 65535 - 20 (IPv4) - 8 (UDP)


def check_name(value: str) -> str:
    """Names become file and directory names and point ids: keep them plain."""
    if not NAME_PATTERN.match(value):
        raise ValueError(
            f"expected a name of lowercase letters, digits and '-' (such as 'acl-1000'), "
            f"got {toml_repr(value)}"
        )
    return value


Name = Annotated[str, AfterValidator(check_name)]


# ---------------------------------------------------------------- value types

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class ValueDoc:
    """How a value type reads, for the generated reference (secperf/docgen): its type
    in words, its unit, an example as TOML writes it, its bounds, whether a list of
    values (a sweep) is allowed, and how a default prints."""

    type: str
    unit: str = ""
    example: str = ""
    bounds: str = ""
    sweep: bool = False
    show: Callable[[object], str] | None = None
    none: str = "unset"  # what an absent value (None) means


def documented(func: F, doc: ValueDoc) -> F:
    """`func` (a validator) carrying the ValueDoc of the values it reads."""
    func.__value_doc__ = doc  # type: ignore[attr-defined]
    return func


def value_doc(func: object) -> ValueDoc | None:
    """The ValueDoc a validator carries, if any."""
    doc = getattr(func, "__value_doc__", None)
    return doc if isinstance(doc, ValueDoc) else None


def _show_size(v: object) -> str:
    """A size as a scenario writes it; a whole float (a bound, an example) is its bytes."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f'"{fmt_size(v)}"' if isinstance(v, int) else toml_repr(v)


def _show_duration(v: object) -> str:
    return f'"{fmt_duration(v)}"' if isinstance(v, int | float) else toml_repr(v)


def _show_rate(v: object) -> str:
    return f'"{fmt_rate(v)}"' if isinstance(v, int) or v is None else toml_repr(v)


# What each parser reads, and examples to choose from (the first within the bounds).
_PARSED: dict[object, tuple[str, str, tuple[float, ...], Callable[[object], str] | None]] = {}


def _first_within(choices: tuple[float, ...], lo: float | None, hi: float | None) -> float:
    for c in choices:
        if (lo is None or c >= lo) and (hi is None or c <= hi):
            return c
    return lo if lo is not None else (hi or 0)


def bounded(
    parse: Callable[[object], T],
    lo: float | None,
    hi: float | None,
    what: str,
    show: Callable[[float], str] | None = None,
    unit: str | None = None,
) -> Callable[[object], T]:
    """`parse`, then lo <= value <= hi; `show` writes a bound in the error (with its unit);
    `unit` is what the value counts, for the reference (the parser's own by default)."""
    if show is None and parse is parse_size:
        show = human_size
    elif show is None and parse is parse_duration:
        show = human_duration
    shown: Callable[[float], str] = show or plain_number
    kind, own_unit, choices, show_value = _PARSED.get(parse, ("number", "", (1,), None))
    example = _first_within(choices, lo, hi)
    low = "" if lo is None else shown(lo)
    high = "" if hi is None else shown(hi)
    doc = ValueDoc(
        kind,
        own_unit if unit is None else unit,
        show_value(example) if show_value else plain_number(example),
        f"{low} … {high}" if low and high else f"≥ {low}" if low else f"≤ {high}" if high else "",
        show=show_value,
    )

    def check(value: object) -> T:
        parsed = parse(value)
        if parsed is None:
            return parsed
        assert isinstance(parsed, int | float)
        if lo is not None and parsed < lo:
            raise ValueError(f"{what} must be at least {shown(lo)} (got {toml_repr(value)})")
        if hi is not None and parsed > hi:
            raise ValueError(f"{what} must be at most {shown(hi)} (got {toml_repr(value)})")
        return parsed

    return documented(check, doc)


def parse_count(value: object) -> int:
    # TOML writes 1e6 as a float: a whole one is the count it says.
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {toml_repr(value)}")
    return value


def one_or_sweep(
    parse_one: Callable[[object], T],
) -> Callable[[object, ValidationInfo], T | list[T]]:
    """A value or a list of values (a sweep), every item parsed alike.

    A product sweep must not repeat a value (it would measure a point twice);
    a zip sweep may (request = [32, 32], response = [256, 512])."""

    def parse(value: object, info: ValidationInfo) -> T | list[T]:
        if not isinstance(value, list | tuple):
            return parse_one(value)
        if not value:
            raise ValueError("a sweep list needs at least one value")
        items: list[T] = []
        for i, item in enumerate(value):
            if isinstance(item, list | tuple):
                raise ValueError(f"item {i}: expected a single value, got a nested list")
            try:
                items.append(parse_one(item))
            except ValueError as exc:
                raise ValueError(f"item {i}: {exc}") from None
        zipped = info.data.get("sweep") == "zip"
        if not zipped and len(set(map(repr, items))) != len(items):
            raise ValueError(f"a sweep list repeats a value: {toml_repr(list(value))}")
        return items

    one = value_doc(parse_one)
    return documented(parse, replace(one, sweep=True)) if one else parse


_PARSED[parse_size] = ("size", "bytes", (16384, 1500, 64, 1), _show_size)
_PARSED[parse_duration] = ("duration", "s", (5, 30, 0.5, 1, 0.01, 0), _show_duration)
_PARSED[parse_count] = ("integer", "", (4, 10, 100, 1000, 1), None)

RATE_DOC = ValueDoc(
    "rate", "bits/s", '"100mbit"', '> 0, or "unlimited"', show=_show_rate, none='`"unlimited"`'
)
Rate = Annotated[int | None, PlainValidator(documented(parse_rate, RATE_DOC))]

MessageSize = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_size, 1, 64 * 1024**2, "a size")))
]
TransactionSize = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_size, 1, 64 * 1024**2, "a size")))
]


def _socket_buffer(value: object) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "default"):
        return None
    return bounded(parse_size, 1, 2**31 - 1, "a socket buffer")(value)


def _receive_lowat(value: object) -> int | None:
    if value is None:
        return None
    return bounded(parse_size, 1, 64 * 1024**2, "a receive low-water mark")(value)


ReceiveLowat = Annotated[
    int | None,
    PlainValidator(
        documented(
            _receive_lowat, ValueDoc("size", "bytes", '"256KiB"', "1 B … 64 MiB", show=_show_size)
        )
    ),
]
SocketBuffer = Annotated[
    int | list[int | None] | None,
    PlainValidator(
        one_or_sweep(
            documented(
                _socket_buffer,
                ValueDoc(
                    'size or "default"',
                    "bytes",
                    '"64KiB"',
                    "1 B … 2 GiB − 1",
                    show=_show_size,
                    none='`"default"` (the system\'s)',
                ),
            )
        )
    ),
]
SweepRate = Annotated[int | list[int | None] | None, PlainValidator(one_or_sweep(parse_rate))]
Parallel = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_count, 1, 128, "parallel")))
]
Inflight = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_count, 1, 64, "inflight")))
]


class StrictModel(BaseModel):
    """Unknown keys are errors; no silent coercion of "3" to 3."""

    # nan and inf are no value of any key (pydantic's floats accept them by default).
    # A string below a field is its description (the generated docs/scenario-format.md).
    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True
    )


NonNegativeDuration = Annotated[float, PlainValidator(bounded(parse_duration, 0, 600, "a warm-up"))]
PositiveDuration = Annotated[
    float, PlainValidator(bounded(parse_duration, 0.001, 3600, "a duration"))
]


Payload = Literal["random", "zeros", "text"]


def udp_fits(value: int | list[int], info: ValidationInfo, what: str) -> int | list[int]:
    """Over UDP every size (or swept size) must fit one datagram."""
    if info.data.get("protocol") == "udp":
        too_big = [
            v for v in (value if isinstance(value, list) else [value]) if v > UDP_MAX_PAYLOAD
        ]
        if too_big:
            raise ValueError(f"a UDP {what} is at most {UDP_MAX_PAYLOAD} bytes (got {too_big[0]})")
    return value


TRANSFER_MAX = 2**40  # the engine's limit on one fixed transfer (1 TiB)


def _payload(value: object) -> str:
    if value not in ("random", "zeros", "text"):
        raise ValueError(f'expected "random", "zeros" or "text", got {toml_repr(value)}')
    return str(value)


def _link_rate(value: object) -> int | None:
    """A link rate for a workload's points; "unlimited" is 0 (no shaping), None unset."""
    if value is None:
        return None
    bps = parse_rate(value)
    return 0 if bps is None else bps


def _transfer_bytes(value: object) -> int | None:
    if value is None:
        return None
    return bounded(parse_size, 1, TRANSFER_MAX, "a transfer size")(value)


SweepPayload = Annotated[
    str | list[str],
    PlainValidator(
        one_or_sweep(
            documented(_payload, ValueDoc('`"random"`, `"zeros"` or `"text"`', example='"text"'))
        )
    ),
]
LinkRate = Annotated[
    int | list[int] | None,
    PlainValidator(
        one_or_sweep(
            documented(
                _link_rate,
                replace(
                    RATE_DOC, example='"10mbit"', show=lambda v: _show_rate(v or None), none="unset"
                ),
            )
        )
    ),
]
TransferBytes = Annotated[
    int | list[int] | None,
    PlainValidator(
        one_or_sweep(
            documented(
                _transfer_bytes,
                ValueDoc("size", "bytes", '"16MiB"', "1 B … 1 TiB", show=_show_size),
            )
        )
    ),
]


def rule_file_or_count(value: object, info: ValidationInfo) -> Path | int:
    """A rule file (relative to the scenario, else to the checkout for the shipped
    files; parsed now, so a bad rule is reported as file:line before any run) or a
    count of rules to generate (secperf.ips_rules's subset of the Snort syntax)."""
    if isinstance(value, bool):
        raise ValueError("rules must be a rule file or a number of rules to generate")
    if isinstance(value, int):
        if not 1 <= value <= 100_000:
            raise ValueError(f"rules = {value}: generate 1..100000 rules")
        return value
    if not isinstance(value, str | Path):
        raise ValueError("rules must be a rule file or a number of rules to generate")
    context = info.context if isinstance(info.context, dict) else {}
    path = Path(value)
    if not path.is_absolute():
        base = context.get("base_dir")
        path = Path(base or Path.cwd()) / path
        if not path.is_file():
            # The shipped rule files: relative to the checkout too.
            shipped = Path(__file__).resolve().parents[2] / value
            path = shipped if shipped.is_file() else path
    if context.get("check_files", True):
        if not path.is_file():
            raise ValueError(f"rule file {str(value)!r} not found (looked for {path})")
        try:
            ips_rules.parse_rules(path)
        except MechanismError as e:
            raise ValueError(str(e)) from None
    return path


RULES_DOC = ValueDoc(
    "rule file (path) or integer 1 … 100000",
    "",
    '"rules/web.rules"',
    show=lambda v: toml_repr(str(v)),
)
RuleFileOrCount = Annotated[Path | int, PlainValidator(documented(rule_file_or_count, RULES_DOC))]


def _variant_name(value: str) -> str:
    check_name(value)
    if value == "baseline":
        raise ValueError("'baseline' is reserved for the path without the mechanism")
    return value


VariantName = Annotated[str, AfterValidator(_variant_name)]


def _measured_variant(value: str) -> str:
    family, bracket, _ = value.partition("[")
    _variant_name(family)
    if bracket and not value.endswith("]"):
        raise ValueError(f"{value!r}: one value of a sweep is written NAME[key=value]")
    return value


# A workload's `variants` entry: a variant's name (all of its sweep's values) or one
# expanded name, NAME[key=value] (the scenario checks that the variant expands into it).
MeasuredVariant = Annotated[str, AfterValidator(_measured_variant)]


def chosen_measures(chosen: Sequence[str], variant: str) -> bool:
    """Whether a workload whose `variants` list is `chosen` measures `variant`: an
    expanded name ('ovpn[cipher=none]') listed itself or by its family, or a family's
    name of which one value is listed; an empty list measures every variant."""
    family = variant.partition("[")[0]
    return (
        not chosen
        or variant in chosen
        or family in chosen
        or any(c.startswith(f"{variant}[") for c in chosen)
    )


# ---------------------------------------------------------------- rates, times, file sets


def _file_sizes(value: object) -> list[int]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError('files is a list of sizes, e.g. ["1KiB", "80KiB"]')
    check = bounded(parse_size, 1, 1024**3, "a file size")
    sizes = [check(v) for v in value]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"files repeats a size: {toml_repr(list(value))}")
    return sizes


FileSizes = Annotated[
    list[int],
    PlainValidator(
        documented(
            _file_sizes,
            ValueDoc(
                "list of sizes",
                "bytes",
                '["1KiB", "80KiB"]',
                "each 1 B … 1 GiB",
                show=lambda v: (
                    "[" + ", ".join(_show_size(x) for x in v) + "]"
                    if isinstance(v, list)
                    else toml_repr(v)
                ),
            ),
        )
    ),
]

# Every file of one workload's file sets together: each is built in memory and written
# to the server host (nginx's and vsftpd's folders), so a scenario may not ask for
# more than this in all.
FILE_SET_TOTAL_MAX = 1024**3


def check_file_sets_total(sets: dict[str, list[int]]) -> None:
    """Refuse file sets (key -> sizes) that total more than FILE_SET_TOTAL_MAX."""
    total = sum(sum(sizes) for sizes in sets.values())
    if total > FILE_SET_TOTAL_MAX:
        keys = list(sets)
        named = keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + f" and {keys[-1]}"
        raise ValueError(
            f"{named} total {total / 1024**3:.1f} GiB: a workload's files may total at most "
            f"1 GiB (each is built in memory and written to the server host); use fewer or "
            "smaller files"
        )


PerSecond = Annotated[float, Field(gt=0, le=10_000_000)]
# Durations everywhere: 5, "5s" and "500ms" alike.
Timeout = Annotated[float, PlainValidator(bounded(parse_duration, 0.001, 120, "a timeout"))]
HoldTime = Annotated[float, PlainValidator(bounded(parse_duration, 0, 600, "a hold time"))]
# The engine's event-loop busy poll (µs; crr, http): spin this long before sleeping.
# Worth it only where the client host has CPUs of its own (docs/performance.md).
BusyPoll = Annotated[int, Field(ge=0, le=10_000)]


# ---------------------------------------------------------------- rule files

SHIPPED = Path(__file__).resolve().parents[2]  # the checkout: rules/ ships with secperf


def rule_file(value: str | Path, info: ValidationInfo) -> Path:
    """A Snort-subset rule file (secperf.ips_rules), relative to the scenario file (the
    loader passes its directory as `base_dir`), else to the checkout for the shipped
    ones; parsed now, so that a bad rule is reported as file:line before any run."""
    context = info.context if isinstance(info.context, dict) else {}
    path = Path(value)
    if not path.is_absolute():
        base = context.get("base_dir")
        path = Path(base or Path.cwd()) / path
        if not path.is_file():
            shipped = SHIPPED / value
            path = shipped if shipped.is_file() else path
    if context.get("check_files", True):
        if not path.is_file():
            raise ValueError(f"rule file {str(value)!r} not found (looked for {path})")
        try:
            ips_rules.parse_rules(path)
        except MechanismError as e:
            raise ValueError(str(e)) from None
    return path

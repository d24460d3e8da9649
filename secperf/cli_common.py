"""What the `secperf` commands share: exit codes, the consoles, the gate's options and
its checks, and how an error or a result becomes an exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from secperf.errors import ScenarioError, SecperfError
from secperf.report.gate import (
    FAIL,
    RULE_WORDS,
    UNMEASURED,
    Figures,
    GateError,
    Outcome,
    check_expectations,
    failed,
    summary_lines,
    write_junit,
)
from secperf.report.terminal import print_report
from secperf.results.metrics import METRICS
from secperf.scenario.expect import Expect, Rule, parse_expect, problems
from secperf.scenario.scenario import Scenario

# Exit codes (docs/cli.md): 0 ok, 2 usage (a bad command line, an expectation that
# matches nothing), 3 invalid scenario, 4 a run, report or comparison failed,
# 5 a threshold failed (the gate), 130 interrupted (Ctrl-C).
EXIT_USAGE = 2
EXIT_SCENARIO = 3
EXIT_FAILED = 4
EXIT_THRESHOLD = 5
EXIT_INTERRUPTED = 130

# Piped output (CI, `tee`) gets a width that fits the tables instead of 80 columns.
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True, soft_wrap=True)


def exit_code(exc: SecperfError) -> int:
    return EXIT_SCENARIO if isinstance(exc, ScenarioError) else EXIT_FAILED


def fail(exc: SecperfError, code: int | None = None) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(exit_code(exc) if code is None else code)


DETAILS = typer.Option(
    "--details", help="Print every table after the answer (the default is the answer alone)."
)
EXPECT = typer.Option(
    "--expect",
    metavar="THRESHOLD",
    help="A threshold, checked after the scenario's [[expect]]: e.g. \"acl-new tcp-crr "
    'degradation < 10%" or "acl-new tcp-rr tps > 5000" (repeatable; docs/ci-example.md). '
    f"A failed one exits {EXIT_THRESHOLD}.",
)
GATE_RULE = typer.Option(
    "--gate-rule",
    metavar="interval|mean",
    help="How a threshold is judged: interval (fail only when the whole confidence interval "
    "is past it; the default) or mean (fail when the mean is).",
)
JUNIT = typer.Option(
    "--junit",
    metavar="FILE",
    help="Write the thresholds' outcomes as JUnit XML here (for CI servers).",
)
OUT = typer.Option(
    "--out", metavar="DIR", help="Where run directories go.", envvar="SECPERF_RESULTS"
)


def _rule(value: str) -> Rule:
    if value not in RULE_WORDS:
        err_console.print(
            f"[bold red]error:[/] --gate-rule {escape(value)!r}: expected interval or mean",
            highlight=False,
        )
        raise typer.Exit(EXIT_USAGE)
    return "mean" if value == "mean" else "interval"


def _parse_expectations(texts: list[str]) -> list[Expect]:
    """--expect texts, each checked for its form; a bad one exits 2."""
    out = []
    for text in texts:
        try:
            out.append(parse_expect(text, METRICS))
        except ValidationError as exc:
            why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            _usage(f"--expect {text!r}: {why}")
        except ValueError as exc:
            _usage(f"--expect {exc}")
    return out


def _usage(message: str) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(EXIT_USAGE)


def _check_names(sc: Scenario, expectations: list[Expect]) -> None:
    """Before any traffic: every --expect names a variant, workload and metric of `sc`."""
    for e in expectations:
        for key, message in problems(e, sc.variant_names(), sc.metrics_by_workload()):
            _usage(f"--expect {e.describe()!r}: its {key} {message}")


def _gate(
    expectations: list[Expect],
    figures: Figures,
    rule: Rule,
    junit: Path | None,
    suite: str,
    properties: dict[str, str],
) -> list[Outcome]:
    """Check the thresholds (none: nothing to check, no file written)."""
    if not expectations:
        if junit is not None:
            _usage("--junit needs thresholds to report: the scenario's [[expect]] or --expect")
        return []
    try:
        outcomes = check_expectations(expectations, figures, rule)
    except GateError as exc:
        _usage(str(exc))
        raise  # unreachable: _usage exits
    if junit is not None:
        try:
            write_junit(junit, outcomes, suite, {**properties, "rule": rule})
        except SecperfError as exc:
            raise fail(exc) from None
    return outcomes


def _print_gate(out: Console, outcomes: list[Outcome]) -> None:
    lines = summary_lines(outcomes)
    if not lines:
        return
    out.print()
    for line in lines:
        bad = line.startswith((f"{FAIL}:", f"{UNMEASURED}:", "gate: FAILED"))
        out.print(escape(line), style="bold red" if bad else None, highlight=False)


def _loud() -> Console:
    """Where the answer goes: the console, or with --quiet one that still prints."""
    return Console(width=None if sys.stdout.isatty() else 150) if console.quiet else console


def _show(
    summary: dict[str, Any], meta: dict[str, Any], details: bool, outcomes: list[Outcome]
) -> None:
    """The answer (with --quiet alone), the tables with --details, then the gate."""
    out = _loud()
    print_report(out, summary, meta, details=details, header=not console.quiet)
    _print_gate(out, outcomes)


def _exit_for(outcomes: list[Outcome], meta: dict[str, Any] | None = None) -> None:
    """Exit 4 when a variant could not be measured (the run went on to its end; the
    report's FAILED lines say which and why), else 5 when a threshold failed."""
    unmeasured = (meta or {}).get("failed") or []
    if unmeasured:
        err_console.print(
            f"[bold red]error:[/] {len(unmeasured)} variant(s) could not be measured; "
            "the report's FAILED lines say which and why",
            highlight=False,
        )
        raise typer.Exit(EXIT_FAILED)
    if failed(outcomes):
        raise typer.Exit(EXIT_THRESHOLD)


BUDGET = typer.Option(
    "--budget",
    help="The run's measuring time instead of the scenario's [repeat] budget (e.g. \"10min\").",
)
UNTIL_TARGET = typer.Option(
    "--until-target",
    help="No time budget: rounds go on until every asked interval is met (or [repeat] max).",
)
CALIBRATE = typer.Option(
    "--calibrate",
    help="The noise calibration before the first round, instead of [repeat] calibrate: "
    "cached (this machine's last one for the testbed's shape, measured when there is "
    "none), fresh (measured again) or off.",
)
# --until-target: the longest budget a scenario may give (a week).
UNTIL_TARGET_S = 7 * 86400.0


def with_precision(
    sc: Scenario, budget: str | None, until_target: bool, calibrate: str | None
) -> Scenario:
    """The scenario with the command line's budget and calibration (exit 2 on a bad
    value): what the run embeds in run.json is what it ran."""
    if budget is not None and until_target:
        _usage("--budget and --until-target: give one")
    if calibrate is not None and calibrate not in ("cached", "fresh", "off"):
        _usage(f"--calibrate {calibrate!r}: expected cached, fresh or off")
    changes: dict[str, Any] = {}
    if until_target:
        changes["budget"] = UNTIL_TARGET_S
    elif budget is not None:
        changes["budget"] = budget
    if calibrate is not None:
        changes["calibrate"] = calibrate
    if not changes:
        return sc
    try:
        repeat = type(sc.repeat).model_validate({**sc.repeat.model_dump(), **changes})
    except ValidationError as exc:
        _usage(f"--budget {budget!r}: {exc.errors()[0]['msg']}")
    return sc.model_copy(update={"repeat": repeat})

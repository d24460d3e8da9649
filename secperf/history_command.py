"""`secperf history SCENARIO` (the trend table, the page, the history gate) and
`secperf history import DIR…`; and the store options `secperf run` and `review` share
(secperf.cli registers the command; docs/history.md)."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from secperf.cli_common import (
    EXIT_THRESHOLD,
    EXIT_USAGE,
    JUNIT,
    _loud,
    console,
    err_console,
    fail,
)
from secperf.errors import SecperfError
from secperf.history.changes import Series, machine_text
from secperf.history.gate import (
    HistoryOutcome,
    HistoryRule,
    check_history,
    parse_rule,
    write_junit,
)
from secperf.history.ingest import parse_labels
from secperf.history.page import write_page
from secperf.history.query import ROW_FIELDS, add_run_dir, flat_rows, load_series
from secperf.history.store import DEFAULT_STORE, STORE_ENV, store_path
from secperf.report.gate import FAIL, INCONCLUSIVE
from secperf.scenario.loader import load_scenario

STORE = typer.Option(
    "--store",
    metavar="FILE",
    envvar=STORE_ENV,
    help="The results store (SQLite); default results/history.sqlite.",
)
LABEL = typer.Option(
    "--label", metavar="KEY=VALUE", help="A label kept with the run in the store (repeatable)."
)
NO_HISTORY = typer.Option("--no-history", help="Do not add the run to the results store.")
EXPECT_HISTORY = typer.Option(
    "--expect-history",
    metavar="RULE",
    help='A history gate: "no regression since the last change point" or "within the '
    f"last N runs' range\" (repeatable). A failed one exits {EXIT_THRESHOLD}.",
)


HISTORY_JUNIT = typer.Option(
    "--history-junit", metavar="FILE", help="Write the history gate's outcomes as JUnit XML here."
)


def rules_or_exit(texts: list[str] | None) -> list[HistoryRule]:
    try:
        return [parse_rule(t) for t in texts or []]
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def history_gate(
    scenario: str,
    rules: list[HistoryRule],
    store: Path | None,
    junit: Path | None,
    out: Console | None = None,
) -> list[HistoryOutcome]:
    """`run --expect-history`: the rules on the store's series, the run just added being
    the newest (printed; a failure to read the store is an error)."""
    if not rules:
        return []
    try:
        outcomes = check_history(rules, load_series(scenario, store=store))
        if junit is not None:
            write_junit(junit, outcomes, scenario, {"rule": "; ".join(r.describe() for r in rules)})
    except SecperfError as exc:
        raise fail(exc) from None
    print_outcomes(out or _loud(), outcomes)
    return outcomes


def labels_or_exit(texts: list[str] | None) -> dict[str, str]:
    try:
        return parse_labels(texts or [])
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def run_store(store: Path | None, out: Path) -> Path | None:
    """The store a run adds itself to: --store, else $SECPERF_STORE, else beside the run
    directories (`--out`: results/history.sqlite by default)."""
    if store is not None or os.environ.get(STORE_ENV):
        return store
    return out / DEFAULT_STORE.name


def record(run_dir: Path, labels: dict[str, str], store: Path | None, out: Console) -> None:
    """Add a finished run to the store; a failure is a warning, never a lost run."""
    try:
        add_run_dir(run_dir, labels, store)
    except Exception as exc:  # the run directory stands whatever the store does
        why = str(exc) if isinstance(exc, SecperfError) else repr(exc)
        err_console.print(
            f"[yellow]warning: the run is kept, but not in the results store:[/] {escape(why)}",
            highlight=False,
        )
        return
    out.print(f"history: added to {escape(str(store_path(store)))}", highlight=False)


def _mark(s: Series, i: int) -> str:
    marks = []
    if any(st.index == i for st in s.steps):
        st = next(st for st in s.steps if st.index == i)
        marks.append(f"[red]▲ step {st.size:+.1f} [{st.low:+.1f}, {st.high:+.1f}][/]")
    if i in s.machine_changes():
        marks.append("[dim]machine changed[/]")
    if i in s.scenario_changes():
        marks.append("[dim]scenario changed[/]")
    if s.points[i].other_machine:
        marks.append("[dim]another machine[/]")
    return " ".join(marks)


def print_series(out: Console, series: list[Series]) -> None:
    for s in series:
        unit = f" ({s.unit})" if s.unit else ""
        table = Table(title=escape(s.title + unit), title_justify="left", show_edge=False)
        for col in ("started", "labels", "degradation %", "verdict", "n", ""):
            table.add_column(col)
        for i, p in enumerate(s.points):
            table.add_row(
                p.started[:19],
                escape(" ".join(f"{k}={v}" for k, v in sorted(p.labels.items()))),
                f"{p.mean:+.1f} [{p.low:+.1f}, {p.high:+.1f}]",
                escape(p.verdict or ""),
                str(p.n or ""),
                _mark(s, i),
            )
        out.print(table)
        for st in s.steps:
            out.print(
                f"  change point at {escape(st.point.who())}: {st.size:+.1f} points "
                f"[{st.low:+.1f}, {st.high:+.1f}] ({st.before:+.1f} % → {st.after:+.1f} %)",
                highlight=False,
            )
        for i in s.machine_changes():
            out.print(
                f"  machine changed at {escape(s.points[i].who())}: "
                f"{escape(machine_text(s.points[i].fingerprint))}",
                highlight=False,
            )
        out.print()


def print_outcomes(out: Console, outcomes: list[HistoryOutcome]) -> None:
    for o in outcomes:
        style = "bold red" if o.failed else "yellow" if o.status == INCONCLUSIVE else None
        out.print(
            escape(f"{o.status}: {o.series.title}: {o.rule.describe()}: {o.text}"),
            style=style,
            highlight=False,
        )
    bad = sum(o.failed for o in outcomes)
    out.print(
        f"history gate: {'FAILED' if bad else 'passed'}: {len(outcomes) - bad} of "
        f"{len(outcomes)} series within the rule",
        style="bold red" if bad else None,
        highlight=False,
    )


def _scenario_name(text: str) -> str:
    path = Path(text)
    if path.suffix == ".toml" and path.is_file():
        return load_scenario(path).name
    return text


def history(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="SCENARIO | import DIR…",
            help="A scenario's name (or file): its trend; or `import` and run directories.",
        ),
    ],
    metric: Annotated[str | None, typer.Option("--metric", help="Only this metric.")] = None,
    variant: Annotated[str | None, typer.Option("--variant", help="Only this variant.")] = None,
    workload: Annotated[str | None, typer.Option("--workload", help="Only this workload.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", metavar="DATE", help="Only runs started since (ISO).")
    ] = None,
    store: Annotated[Path | None, STORE] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the series as JSON.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the series as CSV.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", metavar="FILE", help="Write the trend page here.")
    ] = None,
    all_machines: Annotated[
        bool,
        typer.Option("--all-machines", help="Keep runs on other machines than the newest's."),
    ] = False,
    expect_history: Annotated[list[str] | None, EXPECT_HISTORY] = None,
    junit: Annotated[Path | None, JUNIT] = None,
    label: Annotated[list[str] | None, LABEL] = None,
) -> None:
    """A scenario's history: a trend table per row, change points that name the run where
    a cost moved, and the history gate (exit 5); `history import DIR…` adds old runs."""
    try:
        if args[0] == "import":
            labels = labels_or_exit(label)
            if len(args) < 2:
                err_console.print("[bold red]error:[/] history import: give run directories")
                raise typer.Exit(EXIT_USAGE)
            for d in args[1:]:
                run_id, new = add_run_dir(Path(d), labels, store)
                console.print(
                    f"{'added' if new else 'already there'}: {escape(d)} (run {run_id})",
                    highlight=False,
                )
            return
        if len(args) != 1:
            err_console.print("[bold red]error:[/] history: give one scenario")
            raise typer.Exit(EXIT_USAGE)
        rules = rules_or_exit(expect_history)
        if junit is not None and not rules:
            err_console.print("[bold red]error:[/] --junit needs --expect-history")
            raise typer.Exit(EXIT_USAGE)
        name = _scenario_name(args[0])
        series = load_series(
            name,
            store=store,
            metric=metric,
            variant=variant,
            workload=workload,
            since=since,
            all_machines=all_machines,
        )
        outcomes = check_history(rules, series)
        if junit is not None:
            write_junit(junit, outcomes, name, {"rule": "; ".join(r.describe() for r in rules)})
        if html is not None:
            write_page(html, name, series)
    except SecperfError as exc:
        raise fail(exc) from None
    if as_json:
        doc = {
            "scenario": name,
            "series": [
                {
                    "variant": s.variant,
                    "workload": s.workload,
                    "point": s.label,
                    "metric": s.metric,
                    "unit": s.unit,
                    "change_points": [st.to_json() for st in s.steps],
                    "machine_changes": s.machine_changes(),
                    "runs": flat_rows([s]),
                }
                for s in series
            ],
            "gate": [o.to_json() for o in outcomes],
        }
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
    elif as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=ROW_FIELDS, lineterminator="\n")
        writer.writeheader()
        for r in flat_rows(series):
            writer.writerow({**r, "labels": json.dumps(r["labels"], sort_keys=True)})
    else:
        if not series:
            console.print(f"no run of {escape(name)} with a paired degradation in the store")
        print_series(console, series)
        if html is not None:
            console.print(f"page: [bold]{escape(str(html))}[/]")
        if outcomes:
            print_outcomes(_loud(), outcomes)
    if any(o.status == FAIL for o in outcomes):
        raise typer.Exit(EXIT_THRESHOLD)

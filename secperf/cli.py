"""The `secperf` command line: run, check, report, compare, clean, doctor (and review,
history: their own modules)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from secperf import __version__
from secperf import verbose as verbose_mod
from secperf.api import check_out_dir, records, to_csv
from secperf.cli_common import (
    BUDGET,
    CALIBRATE,
    DETAILS,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_THRESHOLD,
    EXPECT,
    GATE_RULE,
    JUNIT,
    OUT,
    UNTIL_TARGET,
    _check_names,
    _exit_for,
    _gate,
    _loud,
    _parse_expectations,
    _print_gate,
    _rule,
    _show,
    _usage,
    console,
    err_console,
    exit_code,
    fail,
    with_precision,
)
from secperf.cli_help import in_words
from secperf.errors import SecperfError
from secperf.history_command import (
    EXPECT_HISTORY,
    HISTORY_JUNIT,
    LABEL,
    NO_HISTORY,
    STORE,
    history,
    history_gate,
    labels_or_exit,
    record,
    rules_or_exit,
    run_store,
)
from secperf.ips_rules import parse_rules
from secperf.plan import topology_for
from secperf.plan.inventory import check_inventory
from secperf.report.answer import with_verdicts
from secperf.report.compare import (
    compare_runs,
    differences,
    print_comparison,
    testbed_differences,
)
from secperf.report.gate import (
    compare_figures,
    run_figures,
)
from secperf.report.html import scenario_expectations, write_html, write_pngs
from secperf.report.kept import paper_summary
from secperf.report.paper import markdown as paper_markdown
from secperf.report.rebuild import rebuild
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.review_command import review
from secperf.run.check_traffic import check_traffic
from secperf.run.estimate import estimate, fmt_eta, least_rounds
from secperf.run.precision import precision_said
from secperf.run.preflight import (
    check_kernel,
    check_static,
    install_for,
    install_hint,
    kernel_check_notes,
    missing,
    shipped_tools,
    tools_for,
)
from secperf.run.runner import run_scenario
from secperf.scenario.loader import load_scenario
from secperf.scenario.sweep import expand, expand_scenario
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.hosts.vmconfig import kvm_usable
from secperf.testbed.testbed import clean as clean_ledgers
from secperf.tools import engine_path

app = typer.Typer(
    help="secperf measures what network security costs: put a firewall, NAT, an IPS, a VPN "
    "or a proxy in the path and compare it, with honest statistics, to the path without it.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"secperf {__version__}", highlight=False)
        raise typer.Exit(0)


def _print_json(data: Any) -> None:
    """Machine-readable output: one JSON document on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


@app.callback()
def options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print errors and the final result only.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Show every command secperf runs (nft, tc, ip, daemons, the engine); "
            "a run also keeps them in its commands.log.",
        ),
    ] = False,
) -> None:
    console.quiet = quiet  # set on every call: tests run several in one process
    if verbose:
        verbose_mod.enable(err_console)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="The scenario file (TOML).")],
    out: Annotated[Path, OUT] = Path("results"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout (no tables).")
    ] = False,
    details: Annotated[bool, DETAILS] = False,
    expect: Annotated[list[str] | None, EXPECT] = None,
    gate_rule: Annotated[str, GATE_RULE] = "interval",
    junit: Annotated[Path | None, JUNIT] = None,
    label: Annotated[list[str] | None, LABEL] = None,
    no_history: Annotated[bool, NO_HISTORY] = False,
    store: Annotated[Path | None, STORE] = None,
    expect_history: Annotated[list[str] | None, EXPECT_HISTORY] = None,
    history_junit: Annotated[Path | None, HISTORY_JUNIT] = None,
    budget: Annotated[str | None, BUDGET] = None,
    until_target: Annotated[bool, UNTIL_TARGET] = False,
    calibrate: Annotated[str | None, CALIBRATE] = None,
) -> None:
    """Run a scenario: build the testbed, measure, write the run directory and the report;
    add it to the results store; then check its thresholds and history rules (exit 5 when
    one fails)."""

    rule = _rule(gate_rule)
    extra = _parse_expectations(expect or [])
    labels = labels_or_exit(label)
    history_rules = rules_or_exit(expect_history)
    if history_rules and no_history:
        _usage("--expect-history needs the run in the store: drop --no-history")
    if as_json:
        console.quiet = True  # stdout carries the JSON document alone
    try:
        sc = with_precision(load_scenario(scenario), budget, until_target, calibrate)
        _check_names(sc, extra)
        check_out_dir(out)
        rundir = run_scenario(sc, out, console)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: the testbed is torn down; records kept.[/]")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except SecperfError as exc:
        raise fail(exc) from None
    done = RunDir.open(rundir.path)
    html = write_html(done)
    store = run_store(store, out)
    if not no_history:
        record(done.path, labels, store, console)
    summary, meta = done.read_summary(), done.read_run_json()
    outcomes = _gate(
        [*sc.expect, *extra],
        run_figures(summary, done, where=str(done.path)),
        rule,
        junit,
        sc.name,
        {"run": str(done.path)},
    )
    if as_json:
        past = history_gate(sc.name, history_rules, store, history_junit, err_console)
        _print_json(
            {
                "run_dir": str(done.path),
                "report": str(html),
                **with_verdicts(summary),
                "gate": [o.to_json() for o in outcomes],
                "history_gate": [o.to_json() for o in past],
            }
        )
        _exit_for(outcomes, meta)
        _exit_for_history(past)
        return
    _show(summary, meta, details, outcomes)
    console.print(
        f"\nrun directory: [bold]{escape(str(done.path))}[/]\nreport: [bold]{escape(str(html))}[/]"
        + ("" if details else f"\nevery table: secperf report {escape(str(done.path))} --details")
    )
    past = history_gate(sc.name, history_rules, store, history_junit)
    _exit_for(outcomes, meta)
    _exit_for_history(past)


def _exit_for_history(outcomes: list[Any]) -> None:
    if any(o.failed for o in outcomes):
        raise typer.Exit(EXIT_THRESHOLD)


@app.command()
def check(
    scenarios: Annotated[
        list[Path], typer.Argument(help="Scenario files (or IPS .rules files) to validate.")
    ],
    budget: Annotated[str | None, BUDGET] = None,
    until_target: Annotated[bool, UNTIL_TARGET] = False,
    calibrate: Annotated[str | None, CALIBRATE] = None,
) -> None:
    """Validate scenarios and everything they reference, or IPS rule files (*.rules);
    runs no traffic, builds no testbed."""

    failed = 0
    for path in scenarios:
        try:
            if path.suffix == ".rules":  # an IPS rule file (docs/studies/004.md)
                rules = parse_rules(path)
                drops = sum(r.action == "drop" for r in rules)
                console.print(
                    f"[green]ok[/] {escape(str(path))}: {len(rules)} rule(s), {drops} drop",
                    highlight=False,
                )
                continue
            sc = with_precision(load_scenario(path), budget, until_target, calibrate)
            check_static(sc)
            skipped = ""
            notes = kernel_check_notes(sc)
            if notes:
                if os.geteuid() == 0:
                    check_kernel(sc)
                else:
                    skipped = (
                        f"; {'; '.join(notes)} "
                        "(that needs root: run `sudo secperf check` to check them too)"
                    )
            if os.geteuid() == 0 and not skipped:
                # a rule-set review: one traced probe per flow on a throwaway testbed
                traffic = check_traffic(sc)
                for line in traffic.lines() if traffic is not None else []:
                    console.print(f"  {escape(line)}", highlight=False)
            gone = missing(tools_for(sc))
            if any(BACKENDS.get(h.backend).logs_in for h in sc.testbed.hosts.values()):
                # Remote hosts: reach each one (log in, engine, addresses) before any traffic.

                for line in check_inventory(sc, topology_for(sc, expand_scenario(sc))):
                    console.print(f"[green]ok[/] {escape(line)}", highlight=False)
            points = sum(len(expand(w)) for w in sc.workloads)
            variants = sum(len(v.expand(name)) for name, v in sc.variants.items())
            est = estimate(sc)
            note = f" (missing tools: {install_hint(gone)})" if gone else ""
            mark = "[yellow]ok, partly checked[/]" if skipped else "[green]ok[/]"
            console.print(
                f"{mark} {escape(str(path))}: {variants} variant(s) + baseline, "
                f"{points} workload point(s); estimated run time {fmt_eta(est.minimum)} at "
                f"{least_rounds(sc)}"
                + (" and the traced round" if est.traced else "")
                + (
                    f", up to {fmt_eta(est.planned)} within its budget of "
                    f"{fmt_eta(est.budget)} (at most {sc.repeat.max} rounds a point)"
                    if est.planned > est.minimum
                    else ""
                )
                + (
                    f"; its minimum rounds alone exceed the budget of {fmt_eta(est.budget)} "
                    "(they run anyway: raise budget or lower min)"
                    if est.over_budget
                    else ""
                )
                + f"; targets at {sc.repeat.confidence * 100:g} %: each degradation "
                f"±{sc.repeat.degradation_pp:g} points, each value ±{sc.repeat.halfwidth_pct:g} %"
                + f"{escape(skipped)}{note}",
                highlight=False,
            )
            said = precision_said(sc)
            if said is not None:
                console.print(f"  {escape(said)}", highlight=False)
        except SecperfError as exc:
            failed = max(failed, exit_code(exc))
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    if failed:
        raise typer.Exit(failed)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/…).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout (no tables).")
    ] = False,
    as_csv: Annotated[
        bool, typer.Option("--csv", help="Print one CSV line per figure on stdout (no tables).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace the report even if the records now give less."),
    ] = False,
    details: Annotated[bool, DETAILS] = False,
    png: Annotated[
        bool,
        typer.Option("--png", help="Also write every chart as a PNG file in RUN_DIR/charts/."),
    ] = False,
    expect: Annotated[list[str] | None, EXPECT] = None,
    gate_rule: Annotated[str, GATE_RULE] = "interval",
    junit: Annotated[Path | None, JUNIT] = None,
    paper_md: Annotated[
        bool,
        typer.Option(
            "--paper-markdown",
            help="Print the verdicts against the paper as a "
            "Markdown table (docs/studies/) on stdout, nothing else.",
        ),
    ] = False,
    paper_file: Annotated[
        Path | None,
        typer.Option(
            "--paper",
            help="With --paper-markdown: judge the run by this scenario file's [[paper]] "
            "rows (its measurement settings must be the run's).",
        ),
    ] = None,
) -> None:
    """Rebuild the tables and report.html from a run directory alone, print the answer,
    and check the thresholds (the scenario's and --expect; exit 5 when one fails).

    It never replaces a report with less than it had: with records.jsonl missing,
    empty or shorter than what the summary was built from, it stops (exit 4)."""

    if paper_md:  # judged now, from the records or, a kept run, its summary rows
        try:
            sys.stdout.write(paper_markdown(paper_summary(RunDir.open(run_dir), paper_file)))
        except SecperfError as exc:
            raise fail(exc) from None
        return
    try:
        rd = RunDir.open(run_dir)
        meta = rd.read_run_json()
        confidence = float(meta.get("scenario", {}).get("repeat", {}).get("confidence", 0.95))
        # the printed outputs read the run; only the report itself rewrites its files
        summary = rebuild(rd, confidence, force=force, write=not (as_json or as_csv or paper_md))
    except SecperfError as exc:
        raise fail(exc) from None
    for lost in summary.get("dropped_records") or []:
        err_console.print(
            f"[yellow]warning:[/] {escape(str(rd.records_source))}:{lost.get('line')} was "
            f"{escape(str(lost.get('reason')))}; dropped (its round is missing)",
            highlight=False,
        )
    rule = _rule(gate_rule)
    scenario_name = str((meta.get("scenario") or {}).get("name") or rd.path.name)
    try:
        kept = scenario_expectations(meta)
    except SecperfError as exc:
        raise fail(exc) from None
    outcomes = _gate(
        [*kept, *_parse_expectations(expect or [])],
        run_figures(summary, rd, where=str(rd.path)),
        rule,
        junit,
        scenario_name,
        {"run": str(rd.path)},
    )
    charts = write_pngs(rd) if png else []
    if as_json:
        _print_json(
            {
                "run_dir": str(rd.path),
                "report": str(rd.report_html_path),
                **with_verdicts(summary),
                "gate": [o.to_json() for o in outcomes],
            }
        )
        _exit_for(outcomes)
        return
    if as_csv:
        sys.stdout.write(to_csv(records(summary)))
        _exit_for(outcomes)
        return
    _show(summary, meta, details, outcomes)
    console.print(
        f"\nreport: [bold]{escape(str(rd.report_html_path))}[/]"
        + ("" if details else f"\nevery table: secperf report {escape(str(rd.path))} --details")
    )
    if charts:
        console.print(
            f"charts: {len(charts)} PNG files in [bold]{escape(str(charts[0].parent))}[/]"
        )
    _exit_for(outcomes)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the reference, A).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory (B).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")
    ] = False,
    expect: Annotated[list[str] | None, EXPECT] = None,
    gate_rule: Annotated[str, GATE_RULE] = "interval",
    junit: Annotated[Path | None, JUNIT] = None,
    allow_different: Annotated[
        bool,
        typer.Option(
            "--allow-different",
            help="Check thresholds on rows whose testbeds differ between the runs "
            "(refused by default).",
        ),
    ] = False,
) -> None:
    """Compare two runs row by row (by workload, point, variant and metric): both values
    and the difference with its CI; a degradation threshold bounds B against A (exit 5
    when one fails)."""

    rule = _rule(gate_rule)
    extra = _parse_expectations(expect or [])
    try:
        a, b = RunDir.open(run_a), RunDir.open(run_b)
        meta_a, meta_b = a.read_run_json(), b.read_run_json()
        rows = compare_runs(a, b)
        warnings = differences(meta_a, meta_b)
        machine = testbed_differences(meta_a, meta_b)
        summary_b = b.read_summary() if b.has_summary() else build_summary(b)
    except SecperfError as exc:
        raise fail(exc) from None
    if machine:
        warnings.append(
            "the runs' testbeds differ ("
            + "; ".join(machine)
            + "): their figures do not compare"
            + (", thresholds checked anyway (--allow-different)" if allow_different else "")
        )
    where = f"the comparison of {a.path} and {b.path}"
    outcomes = _gate(
        extra,
        compare_figures(rows, summary_b, where, allow_different=allow_different),
        rule,
        junit,
        "compare",
        {"a": str(a.path), "b": str(b.path)},
    )
    if as_json:
        _print_json(
            {
                "a": str(a.path),
                "b": str(b.path),
                "warnings": warnings,
                "rows": rows,
                "gate": [o.to_json() for o in outcomes],
            }
        )
        _exit_for(outcomes)
        return
    for text in warnings:
        err_console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False)
    print_comparison(_loud(), rows, label_a=str(a.path), label_b=str(b.path))
    _print_gate(_loud(), outcomes)
    _exit_for(outcomes)


@app.command()
def clean() -> None:
    """Tear down what dead runs left behind (by their ledgers; nothing else is touched)."""

    try:
        removed = clean_ledgers()
    except SecperfError as exc:
        raise fail(exc) from None
    for item in removed:
        console.print(f"removed {item}", markup=False)
    if not removed:
        console.print("nothing to clean: no ledger of a dead run")


INSTALL = typer.Option(
    "--install", metavar="SCENARIO", help="install what its kinds need (no service left enabled)"
)


@app.command()
def doctor(install: Annotated[Path | None, INSTALL] = None) -> None:
    """Check every tool the shipped scenarios and the benches need, the engine, root and
    KVM, and say how to install what is missing (exit 4 when something is)."""
    try:
        tools = shipped_tools() if install is None else install_for(load_scenario(install), console)
    except SecperfError as exc:
        raise fail(exc) from None
    gone = missing(tools)
    for tool in tools:
        mark = "[red]missing[/]" if tool in gone else "[green]ok[/]"
        console.print(f"{mark:>20}  {tool.program:<26} {tool.needed_for}")
    problems = 0
    try:
        console.print(f"{'[green]ok[/]':>20}  {'secperf-engine':<26} {engine_path()}")
    except SecperfError as exc:
        problems += 1
        console.print(f"{'[red]missing[/]':>20}  {'secperf-engine':<26} {exc.fix}")
    kvm = kvm_usable()
    mark, words = (
        ("[green]ok[/]", "VM variants run accelerated")
        if kvm is None
        else (
            "[yellow]no[/]",
            f"{kvm}: VM variants run emulated (TCG, several times slower)",
        )
    )
    console.print(f"{mark:>20}  {'/dev/kvm':<26} {escape(words)}")
    if os.geteuid() != 0:
        problems += 1
        console.print("[yellow]not root: `secperf run` needs root for namespaces[/]")
    if gone:
        console.print(f"\ninstall the missing tools with:\n  {install_hint(gone)}")
    if gone or problems:
        raise typer.Exit(EXIT_FAILED)
    console.print("\neverything secperf needs is here")


app.command()(review)
app.command()(history)


def main() -> None:
    """The `secperf` command: the app, its help in words (secperf/cli_help.py)."""
    in_words(typer.main.get_command(app))(prog_name="secperf")

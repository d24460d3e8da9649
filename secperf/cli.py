"""The `secperf` command line: run, check, report, compare, clean, doctor."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from secperf import __version__
from secperf import verbose as verbose_mod
from secperf.api import check_out_dir, records, to_csv
from secperf.errors import ScenarioError, SecperfError
from secperf.ips_rules import parse_rules
from secperf.plan import topology_for
from secperf.plan.inventory import check_inventory
from secperf.report.compare import compare_runs, differences, print_comparison
from secperf.report.html import write_html
from secperf.report.rebuild import rebuild
from secperf.report.terminal import print_report
from secperf.results.rundir import RunDir
from secperf.run.estimate import estimate_seconds, fmt_eta
from secperf.run.preflight import (
    all_tools,
    check_kernel,
    check_static,
    install_hint,
    kernel_check_notes,
    missing,
    tools_for,
)
from secperf.run.runner import run_scenario
from secperf.scenario.loader import load_scenario
from secperf.scenario.sweep import expand, expand_scenario
from secperf.testbed.testbed import clean as clean_ledgers
from secperf.tools import engine_path

# Exit codes (README.md): 0 ok, 2 usage (a bad command line), 3 invalid scenario,
# 4 a run, report or comparison failed, 130 interrupted (Ctrl-C).
EXIT_USAGE = 2
EXIT_SCENARIO = 3
EXIT_FAILED = 4
EXIT_INTERRUPTED = 130

app = typer.Typer(
    help="secperf measures what network security costs: put a firewall, NAT, an IPS, a VPN "
    "or a proxy in the path and compare it, with honest statistics, to the path without it.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
# Piped output (CI, `tee`) gets a width that fits the tables instead of 80 columns.
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True, soft_wrap=True)


def exit_code(exc: SecperfError) -> int:
    return EXIT_SCENARIO if isinstance(exc, ScenarioError) else EXIT_FAILED


def fail(exc: SecperfError, code: int | None = None) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(exit_code(exc) if code is None else code)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"secperf {__version__}", highlight=False)
        raise typer.Exit(0)


def _print_json(data: Any) -> None:
    """Machine-readable output: one JSON document on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


@app.callback()
def main(
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
    if quiet:
        console.quiet = True
    if verbose:
        verbose_mod.enable(err_console)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="The scenario file (TOML).")],
    out: Annotated[
        Path, typer.Option("--out", help="Where run directories go.", envvar="SECPERF_RESULTS")
    ] = Path("results"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout (no tables).")
    ] = False,
) -> None:
    """Run a scenario: build the testbed, measure, write the run directory and the report."""

    if as_json:
        console.quiet = True  # stdout carries the JSON document alone
    try:
        sc = load_scenario(scenario)
        check_out_dir(out)
        rundir = run_scenario(sc, out, console)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: the testbed is torn down; records kept.[/]")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except SecperfError as exc:
        raise fail(exc) from None
    done = RunDir.open(rundir.path)
    html = write_html(done)
    meta = done.read_run_json()
    if as_json:
        _print_json({"run_dir": str(done.path), "report": str(html), **done.read_summary()})
    else:
        print_report(console, done.read_summary(), meta)
        console.print(f"\nrun directory: [bold]{done.path}[/]\nreport: [bold]{html}[/]")
    failed = meta.get("failed") or []
    if failed:
        # The run went to its end, but not every variant could be measured: say so
        # in the exit status too (the report's FAILED lines say which and why).
        err_console.print(
            f"[bold red]error:[/] {len(failed)} variant(s) could not be measured; "
            "the report's FAILED lines say which and why",
            highlight=False,
        )
        raise typer.Exit(EXIT_FAILED)


@app.command()
def check(
    scenarios: Annotated[
        list[Path], typer.Argument(help="Scenario files (or IPS .rules files) to validate.")
    ],
) -> None:
    """Validate scenarios and everything they reference, or IPS rule files (*.rules);
    runs no traffic, builds no testbed."""

    failed = 0
    for path in scenarios:
        try:
            if path.suffix == ".rules":  # an IPS rule file (docs/methodology.md)
                rules = parse_rules(path)
                drops = sum(r.action == "drop" for r in rules)
                console.print(
                    f"[green]ok[/] {escape(str(path))}: {len(rules)} rule(s), {drops} drop",
                    highlight=False,
                )
                continue
            sc = load_scenario(path)
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
            gone = missing(tools_for(sc))
            if any(h.backend == "ssh" for h in sc.testbed.hosts.values()):
                # Remote hosts: reach each one (log in, engine, addresses) before any traffic.

                for line in check_inventory(sc, topology_for(sc, expand_scenario(sc))):
                    console.print(f"[green]ok[/] {escape(line)}", highlight=False)
            points = sum(len(expand(w)) for w in sc.workloads)
            variants = sum(len(v.expand(name)) for name, v in sc.variants.items())
            lo, hi = estimate_seconds(sc)
            note = f" (missing tools: {install_hint(gone)})" if gone else ""
            mark = "[yellow]ok, partly checked[/]" if skipped else "[green]ok[/]"
            console.print(
                f"{mark} {escape(str(path))}: {variants} variant(s) + baseline, "
                f"{points} workload point(s); estimated run time {fmt_eta(lo)}"
                + (f" (up to {fmt_eta(hi)} at {sc.repeat.max} rounds)" if hi > lo else "")
                + f"{escape(skipped)}{note}",
                highlight=False,
            )
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
) -> None:
    """Rebuild the tables and report.html from a run directory alone.

    It never replaces a report with less than it had: with records.jsonl missing,
    empty or shorter than what the summary was built from, it stops (exit 4)."""

    try:
        rd = RunDir.open(run_dir)
        meta = rd.read_run_json()
        confidence = float(meta.get("scenario", {}).get("repeat", {}).get("confidence", 0.95))
        summary = rebuild(rd, confidence, force=force)
    except SecperfError as exc:
        raise fail(exc) from None
    for lost in summary.get("dropped_records") or []:
        err_console.print(
            f"[yellow]warning:[/] {escape(str(rd.records_path))}:{lost.get('line')} was "
            f"{escape(str(lost.get('reason')))}; dropped (its round is missing)",
            highlight=False,
        )
    if as_json:
        _print_json({"run_dir": str(rd.path), "report": str(rd.report_html_path), **summary})
        return
    if as_csv:
        sys.stdout.write(to_csv(records(summary)))
        return
    print_report(console, summary, meta)
    console.print(f"\nreport: [bold]{rd.report_html_path}[/]")


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the reference, A).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory (B).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")
    ] = False,
) -> None:
    """Compare two runs row by row: both values and the difference with its CI."""

    try:
        a, b = RunDir.open(run_a), RunDir.open(run_b)
        rows = compare_runs(a, b)
        warnings = differences(a.read_run_json(), b.read_run_json())
    except SecperfError as exc:
        raise fail(exc) from None
    if as_json:
        _print_json({"a": str(a.path), "b": str(b.path), "warnings": warnings, "rows": rows})
        return
    for text in warnings:
        err_console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False)
    print_comparison(console, rows, label_a=str(a.path), label_b=str(b.path))


@app.command()
def clean() -> None:
    """Tear down what dead runs left behind (by their ledgers; nothing else is touched)."""

    try:
        removed = clean_ledgers()
    except SecperfError as exc:
        raise fail(exc) from None
    if removed:
        for item in removed:
            console.print(f"removed {item}", markup=False)
    else:
        console.print("nothing to clean: no ledger of a dead run")


@app.command()
def doctor() -> None:
    """Check every tool the scenarios and benches need, and say how to install what is missing."""

    tools = all_tools()
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
    if os.geteuid() != 0:
        problems += 1
        console.print("[yellow]not root: `secperf run` needs root for namespaces[/]")
    if gone:
        console.print(f"\ninstall the missing tools with:\n  {install_hint(gone)}")
    if gone or problems:
        raise typer.Exit(1)
    console.print("\neverything secperf needs is here")

"""The `secperf` command line: run, check, report, compare, clean, doctor."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from secperf import __version__
from secperf.errors import SecperfError

app = typer.Typer(
    help="secperf measures what network security costs: put a firewall, NAT, an IPS, a VPN "
    "or a proxy in the path and compare it, with honest statistics, to the path without it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI, `tee`) gets a width that fits the tables instead of 80 columns.
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True, soft_wrap=True)


def fail(exc: SecperfError, code: int = 2) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(code)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        console.print(f"secperf {__version__}")
        raise typer.Exit(0)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="The scenario file (TOML).")],
    out: Annotated[
        Path, typer.Option("--out", help="Where run directories go.", envvar="SECPERF_RESULTS")
    ] = Path("results"),
) -> None:
    """Run a scenario: build the testbed, measure, write the run directory and the report."""
    from secperf.report.html import write_html
    from secperf.report.terminal import print_report
    from secperf.results.rundir import RunDir
    from secperf.runner import run_scenario
    from secperf.scenario.loader import load_scenario

    try:
        sc = load_scenario(scenario)
        rundir = run_scenario(sc, out, console)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: the testbed is torn down; records kept.[/]")
        raise typer.Exit(130) from None
    except SecperfError as exc:
        raise fail(exc) from None
    done = RunDir.open(rundir.path)
    print_report(console, done.read_summary(), done.read_run_json())
    html = write_html(done)
    console.print(f"\nrun directory: [bold]{done.path}[/]\nreport: [bold]{html}[/]")


@app.command()
def check(
    scenarios: Annotated[list[Path], typer.Argument(help="Scenario files to validate.")],
) -> None:
    """Validate scenarios and everything they reference; runs no traffic, builds no testbed."""
    from secperf.preflight import check_custom_files, install_hint, missing, tools_for
    from secperf.scenario.loader import load_scenario
    from secperf.scenario.sweep import expand

    failed = False
    for path in scenarios:
        try:
            sc = load_scenario(path)
            family = 6 if sc.testbed.family == "ipv6" else 4
            if os.geteuid() == 0:
                check_custom_files(sc, family)
            gone = missing(tools_for(sc))
            points = sum(len(expand(w)) for w in sc.workloads)
            variants = sum(len(v.expand(name)) for name, v in sc.variants.items())
            note = f" (missing tools: {install_hint(gone)})" if gone else ""
            console.print(
                f"[green]ok[/] {escape(str(path))}: {variants} variant(s) + baseline, "
                f"{points} workload point(s){note}"
            )
        except SecperfError as exc:
            failed = True
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    if failed:
        raise typer.Exit(2)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/…).")],
) -> None:
    """Rebuild the tables and report.html from a run directory alone."""
    from secperf.report.html import write_html
    from secperf.report.terminal import print_report
    from secperf.results.rundir import RunDir
    from secperf.results.summary import build_summary

    try:
        rd = RunDir.open(run_dir)
        meta = rd.read_run_json()
        confidence = float(meta.get("scenario", {}).get("repeat", {}).get("confidence", 0.95))
        summary = build_summary(rd, confidence)
        rd.write_summary(summary)
        print_report(console, summary, meta)
        html = write_html(rd)
    except SecperfError as exc:
        raise fail(exc) from None
    console.print(f"\nreport: [bold]{html}[/]")


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the reference).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory.")],
) -> None:
    """Compare two runs row by row: both values and the difference with its CI."""
    from secperf.report.compare import compare_runs, print_comparison
    from secperf.results.rundir import RunDir

    try:
        rows = compare_runs(RunDir.open(run_a), RunDir.open(run_b))
    except SecperfError as exc:
        raise fail(exc) from None
    print_comparison(console, rows)


@app.command()
def clean() -> None:
    """Tear down what dead runs left behind (by their ledgers; nothing else is touched)."""
    from secperf.testbed.testbed import clean as clean_ledgers

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
    from secperf.engine import engine_path
    from secperf.preflight import all_tools, install_hint, missing

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

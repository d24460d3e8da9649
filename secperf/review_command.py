"""`secperf review CURRENT PROPOSED`: the command (secperf.review writes its scenario;
secperf.cli registers it on the app)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import tomli_w
import typer
from rich.console import Group
from rich.markup import escape
from rich.text import Text

from secperf.api import check_out_dir
from secperf.cli_common import (
    DETAILS,
    EXIT_INTERRUPTED,
    EXPECT,
    GATE_RULE,
    JUNIT,
    OUT,
    _check_names,
    _exit_for,
    _gate,
    _loud,
    _parse_expectations,
    _print_gate,
    _rule,
    console,
    err_console,
    fail,
)
from secperf.errors import ScenarioError, SecperfError
from secperf.history_command import (
    LABEL,
    NO_HISTORY,
    STORE,
    labels_or_exit,
    record,
    run_store,
)
from secperf.report.gate import run_figures
from secperf.report.html import write_html
from secperf.report.terminal import print_report
from secperf.results.rundir import RunDir, write_atomic
from secperf.review import parse_interfaces, review_scenario, versus_lines
from secperf.review_live import fetch_live
from secperf.review_suggest import write_suggestion
from secperf.run.runner import run_scenario
from secperf.scenario.loader import load_scenario


def review(
    current: Annotated[
        Path,
        typer.Argument(
            help="The rule set as it is (nft file, nft -j JSON or iptables-save); with "
            "--current-from, the proposed one."
        ),
    ],
    proposed: Annotated[
        Path | None, typer.Argument(help="The rule set as the change would make it.")
    ] = None,
    traffic: Annotated[
        str,
        typer.Option(
            "--traffic",
            metavar="coverage|FILE",
            help="coverage: a flow for every accepting rule and a probe for every denying "
            "rule of both files; or a flow file (CSV, conntrack -L -o extended, pcap).",
        ),
    ] = "coverage",
    interfaces: Annotated[
        str | None,
        typer.Option(
            "--interfaces",
            metavar="NAME=HOST,…",
            help="Which testbed host lies behind each interface the rules name "
            "(e.g. lan0=client,wan0=server); guessed from the rules when not given.",
        ),
    ] = None,
    duration: Annotated[
        str, typer.Option("--duration", metavar="TIME", help="Length of each test.")
    ] = "1s",
    budget: Annotated[
        float | None,
        typer.Option("--budget", metavar="SECONDS", help="Time for the measured rounds."),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            "--rounds", metavar="N", help="Exactly N paired rounds (default: until the target)."
        ),
    ] = None,
    out: Annotated[Path, OUT] = Path("results"),
    print_scenario: Annotated[
        bool,
        typer.Option(
            "--print-scenario", help="Print the scenario the review runs (TOML) and stop."
        ),
    ] = False,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest",
            help="Rewrite the proposed nft rule set where a common pattern allows (a run "
            "of same-shape rules into a set or verdict map; ct state established first; with "
            "--traffic FILE, a hot accept ahead of rules it cannot overlap) and "
            "measure the rewrite as a third variant, `suggested`.",
        ),
    ] = False,
    current_from: Annotated[
        str | None,
        typer.Option(
            "--current-from",
            metavar="HOST",
            help="The current rule set is HOST's live one (a host of --inventory with "
            "backend ssh), read over SSH with `nft -j list ruleset` (nothing else runs there).",
        ),
    ] = None,
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            metavar="FILE",
            help="The inventory --current-from's HOST is in ([hosts.NAME] tables, or a "
            "scenario's [testbed.hosts.NAME]).",
        ),
    ] = None,
    details: Annotated[bool, DETAILS] = False,
    expect: Annotated[list[str] | None, EXPECT] = None,
    gate_rule: Annotated[str, GATE_RULE] = "interval",
    junit: Annotated[Path | None, JUNIT] = None,
    label: Annotated[list[str] | None, LABEL] = None,
    no_history: Annotated[bool, NO_HISTORY] = False,
    store: Annotated[Path | None, STORE] = None,
) -> None:
    """Review a change to a rule set: both files on one testbed, interleaved against plain
    forwarding, with traffic that exercises their rules; behaviour changes first, then
    what the proposed rules cost against the current ones (exit 5 when a threshold fails)."""
    rule = _rule(gate_rule)
    extra = _parse_expectations(expect or [])
    labels = labels_or_exit(label)
    made: list[Path] = []  # the files the review writes (the scenario names them)

    def kept() -> Path:
        # kept for the run, copied into its directory after it, then removed
        if not made:
            made.append(Path(tempfile.mkdtemp(prefix="secperf-review-")))
            err_console.print(f"review files: {escape(str(made[0]))}")
        return made[0]

    try:
        if current_from is not None:
            if proposed is not None or inventory is None:
                raise ScenarioError(
                    "--current-from HOST takes the current rule set from HOST: give the "
                    "proposed file only, and the inventory HOST is in",
                    fix="secperf review --current-from HOST --inventory FILE PROPOSED",
                )
            current, proposed = fetch_live(inventory, current_from, kept()), current
            err_console.print(f"current: {current_from}'s live rule set, in {escape(str(current))}")
        elif proposed is None:
            raise ScenarioError(
                "review takes two rule files: CURRENT and PROPOSED",
                fix="secperf review CURRENT PROPOSED (or --current-from HOST PROPOSED)",
            )
        suggested = None
        if suggest:
            found = write_suggestion(proposed, kept(), traffic)
            for line in found.lines:
                err_console.print(escape(line))
            suggested = found.file
        data = review_scenario(
            current,
            proposed,
            traffic=traffic,
            interfaces=parse_interfaces(interfaces) if interfaces else None,
            duration=duration,
            budget=budget,
            rounds=rounds,
            suggested=suggested,
        )
        text = tomli_w.dumps(data)
        if print_scenario:
            typer.echo(text, nl=False)
            return
        check_out_dir(out)
        with tempfile.TemporaryDirectory(prefix="secperf-review-") as tmp:
            # a file, so that the run keeps the scenario's text as for `secperf run`
            path = Path(tmp) / "review.toml"
            path.write_text(text)
            sc = load_scenario(path)
            _check_names(sc, extra)
            rundir = run_scenario(sc, out, console)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: the testbed is torn down; records kept.[/]")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except SecperfError as exc:
        raise fail(exc) from None
    done = RunDir.open(rundir.path)
    for folder in made:
        for path in sorted(folder.iterdir()):
            write_atomic(done.path / path.name, path.read_bytes())
        shutil.rmtree(folder, ignore_errors=True)  # kept in the run directory now
    html = write_html(done)
    if not no_history:
        record(done.path, labels, run_store(store, out), console)
    summary, meta = done.read_summary(), done.read_run_json()
    outcomes = _gate(
        [*sc.expect, *extra],
        run_figures(summary, done, where=str(done.path)),
        rule,
        junit,
        "review",
        {"run": str(done.path), "current": str(current), "proposed": str(proposed)},
    )
    shown = _loud()
    lines = versus_lines(summary, done)
    lead = (
        [Group(Text(lines[0], style="bold"), *(Text(line) for line in lines[1:]))] if lines else []
    )
    print_report(shown, summary, meta, details=details, header=not console.quiet, lead=lead)
    _print_gate(shown, outcomes)
    console.print(
        f"\nrun directory: [bold]{escape(str(done.path))}[/]\nreport: [bold]{escape(str(html))}[/]"
    )
    _exit_for(outcomes, meta)

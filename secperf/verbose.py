"""`--verbose`: every command secperf runs (nft, tc, ip, daemons, the engine), shown
on stderr as it starts and kept in the run directory's commands.log.

It listens to Python's `subprocess.Popen` audit event, through which every command
secperf starts passes, so no call site has to remember to log.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

_console: Console | None = None
_log: Path | None = None
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "subprocess.Popen" or (_console is None and _log is None):
        return
    argv = args[1]
    if isinstance(argv, str | bytes):
        text = argv.decode(errors="replace") if isinstance(argv, bytes) else argv
    else:
        text = shlex.join(str(a) for a in argv)
    if _console is not None:
        _console.print(f"[dim]$ {escape(text)}[/]", highlight=False)
    if _log is not None:
        try:
            with _log.open("a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {text}\n")
        except OSError:
            pass  # the run directory may be gone (a run that measured nothing)


def enable(console: Console) -> None:
    """Show every command on `console` from now on."""
    global _console, _installed
    _console = console
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def enabled() -> bool:
    return _console is not None


def log_to(path: Path | None) -> None:
    """Also append every command to `path` (None: stop)."""
    global _log
    _log = path


def disable() -> None:
    global _console, _log
    _console = None
    _log = None


def command(text: str) -> None:
    """Show and log a command that does not start a local process (one run over SSH)."""
    _hook("subprocess.Popen", (None, text))

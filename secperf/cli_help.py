"""Help text as a reader needs it: every placeholder a word (FILE, N, VARIANT) instead of
the Python type typer prints (`<path>`, `<list[str]>`, `<bool>` beside a flag), and the text
taken literally, so a scenario key such as [[expect]] is not read as rich markup."""

from __future__ import annotations

from typing import Any

from rich.markup import escape


def _escaped(text: str | None) -> str | None:
    return None if text is None else escape(text)


def in_words(command: Any) -> Any:
    """Name the placeholders and escape the help of a click command and its subcommands.

    A parameter with its own metavar keeps it; a flag takes none; any other is named by
    its own name (SCENARIO, RUN_DIR, VARIANT)."""
    command.help = _escaped(command.help)
    # the help option is made on first use, without a metavar: make it now and name it
    context = command.context_class(command, info_name=command.name, **command.context_settings)
    help_option = command.get_help_option(context)
    if help_option is not None:
        help_option.metavar = ""
    command.short_help = _escaped(command.short_help)
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.metavar is None:
            param.metavar = (param.name or "value").upper()
        if param.param_type_name == "argument":
            # typer prints an argument's Python type beside its name, metavar or not
            param.display_type_rich = lambda ctx: None
        if hasattr(param, "help"):
            param.help = _escaped(param.help)
    for sub in getattr(command, "commands", {}).values():
        in_words(sub)
    return command

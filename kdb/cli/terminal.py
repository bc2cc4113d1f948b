"""What the CLI asks of the terminal: its width, whether to colour, and a pager like git's. The renderers never
look at the terminal; the CLI passes these decisions in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

DEFAULT_WIDTH = 100  # a pipe without COLUMNS


def terminal_width() -> int:
    """`COLUMNS` when set (as in a pipe), else the terminal's width, else DEFAULT_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


def terminal_height() -> int:
    lines = os.environ.get("LINES", "")
    if lines.isdigit() and int(lines) > 0:
        return int(lines)
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).lines


def use_color() -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org) or TERM is dumb."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def pager_command() -> str | None:
    """$KDB_PAGER, else $PAGER, else `less`; None when set to empty or `cat`."""
    for var in ("KDB_PAGER", "PAGER"):
        if var in os.environ:
            value = os.environ[var].strip()
            return None if value in ("", "cat") else value
    return "less" if shutil.which("less") else None


def page_text(text: str, enabled: bool = True) -> None:
    """Write `text` to stdout, through a pager when stdout is a terminal and the text is longer than the screen
    (like git: `less` gets LESS=FRX unless LESS is set)."""
    command = pager_command() if enabled and sys.stdout.isatty() else None
    if command is None or text.count("\n") < terminal_height() - 1:
        sys.stdout.write(text)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    sys.stdout.flush()
    proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)  # noqa: S602 (the user's pager)
    assert proc.stdin is not None
    try:
        proc.stdin.write(text.encode())
        proc.stdin.close()
    except BrokenPipeError:  # the user quit the pager early
        pass
    proc.wait()


def is_click_error(exc: Exception) -> bool:
    """Click's own exceptions (usage errors, Abort), whichever copy of click typer uses."""
    return any(c.__name__ in ("ClickException", "Abort") for c in type(exc).__mro__)


def click_error(exc: Exception) -> int:
    """A usage error as one `kdb: error:` line, exit 2 (`kdb` alone prints the help)."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        sys.stdout.write(exc.ctx.get_help() + "\n")  # type: ignore[attr-defined]
        return 2
    if type(exc).__name__ == "Abort":
        sys.stderr.write("kdb: interrupted\n")
        return 130
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    sys.stderr.write(f"kdb: error: {message}{hint}\n")
    return int(getattr(exc, "exit_code", 2))

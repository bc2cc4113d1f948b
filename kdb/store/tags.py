"""What a snapshot tag may be: one set of rules for every place a new tag enters kdb (`kdb ingest --tag`, the
Python API's `ingest`, `KDB_CAPTURE_TAG` and `kdb capture --tag`, `kdb push/pull --as` and the tag a transfer
creates on the other side).

A tag names folders (capture spools under `capture/spool/<tag>/`) and is typed on command lines, where it also
has to be told from a cache directory (`kdb diff A B`). So it is 1 to 128 ASCII letters, digits and `. _ + = @ -`,
starting with a letter, a digit or `_`: never a path (`/`, `.`, `..`), an option (`-x`), a glob (`*`, `?`, `[`)
or blank. Tags an older kdb stored before these rules are still found by every command that reads a tag (`show`,
`diff`, `rm`, `export`…): only new tags are held to them.
"""

from __future__ import annotations

import re

from kdb.errors import UsageError

MAX_TAG_LENGTH = 128
TAG_RULES = (
    f"1 to {MAX_TAG_LENGTH} letters, digits and . _ + = @ -, starting with a letter, a digit or _ "
    "(a tag names folders and is typed on command lines)"
)
_TAG_RE = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9._+=@-]{{0,{MAX_TAG_LENGTH - 1}}}")
_SHOWN = 40  # characters of a refused tag the message quotes


def is_valid_tag(tag: str) -> bool:
    return isinstance(tag, str) and _TAG_RE.fullmatch(tag) is not None


def check_tag(tag: str, what: str = "tag") -> str:
    """`tag` itself when it follows the rules, else UsageError naming `what` (the option or variable it came
    from: `tag`, `KDB_CAPTURE_TAG`…), the tag (its first characters when long) and the rules."""
    if is_valid_tag(tag):
        return tag
    text = str(tag)
    shown = repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}… ({len(text):,} characters)"
    raise UsageError(f"invalid {what} {shown}: use {TAG_RULES}")

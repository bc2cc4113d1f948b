"""Scanning MLIR text (TTIR/TTGIR) with parentheses and quoted strings: shared by the identity and the normaliser."""

from __future__ import annotations

from collections.abc import Iterator


def _unquoted(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(index, character) of every character from `start` on that is neither inside a quoted string
    nor one of its quotes; `\\` escapes the next character inside a string."""
    i, in_str = start, False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        else:
            yield i, c
        i += 1


def split_top(text: str, sep: str) -> list[str]:
    """Split on `sep` where not nested in (), [], <>, {} or a string."""
    out, depth, start = [], 0, 0
    for i, c in _unquoted(text):
        if i < start:  # inside the separator just split on
            continue
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(text[start:i])
            start = i + len(sep)
    out.append(text[start:])
    return out


def matching_paren(text: str, open_at: int) -> int | None:
    """Index of the `)` closing the `(` at open_at, skipping quoted strings; None when unbalanced."""
    depth = 0
    for i, c in _unquoted(text, open_at):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return None

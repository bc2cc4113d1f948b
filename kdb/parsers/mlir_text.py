"""Scanning MLIR text (TTIR/TTGIR) with parentheses and quoted strings: shared by the identity and the normaliser."""

from __future__ import annotations


def split_top(text: str, sep: str) -> list[str]:
    """Split on `sep` where not nested in (), [], <>, {} or a string."""
    out, depth, start, i, in_str = [], 0, 0, 0, False
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
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    out.append(text[start:])
    return out


def matching_paren(text: str, open_at: int) -> int | None:
    """Index of the `)` closing the `(` at open_at, skipping quoted strings; None when unbalanced."""
    depth, i, in_str = 0, open_at, False
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
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None

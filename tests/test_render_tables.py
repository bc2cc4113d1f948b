"""table_text draws plain tables without rich (kdb/render/tables.py _plain_table): byte for byte what rich draws."""

from __future__ import annotations

import random
import string

import pytest

from kdb.render import tables


def _rich(columns, rows, width):
    return tables.table_text(columns, rows, None, width)


def _random_tables(seed: int, count: int):
    rng = random.Random(seed)
    alphabet = string.ascii_letters[:6] + "0123 _-.()/*:"
    for _ in range(count):
        n = rng.randint(1, 7)
        columns = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(n)]
        rows = []
        for _ in range(rng.randint(0, 6)):
            row = []
            for _ in range(n):
                k = rng.random()
                if k < 0.1:
                    row.append(None)
                elif k < 0.3:
                    row.append(rng.randint(-5, 10 ** rng.randint(0, 12)))
                elif k < 0.45:
                    row.append(rng.random() * 10 ** rng.randint(-3, 8))
                elif k < 0.5:
                    row.append("  ")
                else:
                    row.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))))
            rows.append(row)
        yield columns, rows, rng.choice([None, None, 20, 40, 80, 120, 200])


def test_plain_tables_are_what_rich_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = []
    for columns, rows, width in _random_tables(seed=41, count=1500):
        fast = tables._plain_table(columns, rows, None, width)
        if fast is not None:
            plain.append((columns, rows, width, fast))
    assert len(plain) > 200  # the plain path is taken for most tables of plain text that fit
    monkeypatch.setattr(tables, "_plain_table", lambda *a: None)
    assert [fast for *_, fast in plain] == [_rich(c, r, w) for c, r, w, _ in plain]


def test_rich_draws_what_is_not_plain() -> None:
    """Markup, emoji codes, non-ASCII, a title and a table wider than the width go to rich."""
    cols = ["name", "value"]
    for rows, title, width in (
        ([["[bold]x[/bold]", 1]], None, None),
        ([["a:smile:b", 1]], None, None),
        ([["é中", 1]], None, None),
        ([["x", 1]], "T", None),
        ([["x" * 50, 1]], None, 20),
    ):
        assert tables._plain_table(cols, rows, title, width) is None
    assert tables.table_text(cols, [["[bold]x[/bold]", 1]]).startswith("name")

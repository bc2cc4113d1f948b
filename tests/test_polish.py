"""The command line as a new user meets it: the terminal diff (width, colour, pager, filters), the deep view,
show's key prefixes, one-line usage errors, an empty home, help, completion, progress, and sql's row limit."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import PAIR
from helpers import kdb, python_json_text

ANSI = "\x1b["


def _run(home: Path, *args: str, env: dict[str, str] | None = None, tty: bool = False) -> tuple[int, str, str]:
    """Run `python -m kdb` in a subprocess, its stdout a pseudo-terminal when `tty`."""
    # nothing of the caller's terminal or kdb settings (another test may have set KDB_CATALOG/KDB_STORE)
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "PAGER") and not k.startswith("KDB_")
    }
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "kdb", "--home", str(home), *args]
    if not tty:
        p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=slave, stderr=subprocess.PIPE, env=full_env)
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.wait(timeout=300)
    reader.join(timeout=5)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace"), err


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_table_on_a_terminal_is_coloured_and_paged(pair_home, tmp_path):
    a, b = PAIR
    paged = tmp_path / "paged.txt"
    env = {"KDB_PAGER": f"cat > {paged}", "LINES": "10", "COLUMNS": "120"}
    code, out, _ = _run(pair_home, "diff", a, b, env=env, tty=True)
    assert code == 0 and out.strip() == ""
    text = paged.read_text()
    assert ANSI in text and "regressed" in text
    paged.unlink()
    code, out, _ = _run(pair_home, "diff", a, b, "--no-pager", env={**env, "NO_COLOR": "1"}, tty=True)
    assert code == 0 and not paged.exists()
    assert ANSI not in out and "same " in out
    # a pipe: no colour, no pager, COLUMNS respected, nothing wrapped
    code, out, _ = _run(pair_home, "diff", a, b, env={"KDB_PAGER": f"cat > {paged}", "COLUMNS": "90"})
    assert code == 0 and not paged.exists() and ANSI not in out
    assert all(len(line) <= 90 for line in out.splitlines())


@pytest.mark.slow  # outside the inner loop: 2 s on 2 cores (bench/test_suite.py)
def test_only_top_and_all(pair_home, capsys):
    a, b = PAIR
    doc = json.loads(kdb(capsys, pair_home, "diff", a, b, "--format", "json").out)
    regressed = sum(1 for k in doc["kernels"] if k["verdict"] in ("regressed", "mixed"))
    out = kdb(capsys, pair_home, "diff", a, b, "--only", "regressed", "--expand").out  # every member of a group
    rows = [line for line in out.splitlines() if line.startswith(("regressed", "mixed", "improved", "neutral"))]
    assert len(rows) == regressed and all(not r.startswith(("improved", "neutral")) for r in rows)
    out = kdb(capsys, pair_home, "diff", a, b, "--top", "3").out  # 3 rows: a kernel's or an autotune group's
    assert (
        len([line for line in out.splitlines() if line.startswith(("regressed", "mixed", "improved", "neutral"))]) == 3
    )
    assert "more rows not shown (--top 3)" in out
    only_b = sum(1 for k in doc["kernels"] if k["status"] == "only_b")
    assert only_b and f"{only_b} only in B not shown (--all lists them)" in kdb(capsys, pair_home, "diff", a, b).out
    out = kdb(capsys, pair_home, "diff", a, b, "--all", "--expand").out  # every member of an autotune group
    assert sum(1 for line in out.splitlines() if line.startswith("only in B")) == only_b
    out = kdb(capsys, pair_home, "diff", a, b, "--only", "unmatched", "--expand").out
    assert sum(1 for line in out.splitlines() if line.startswith("only in B")) == only_b
    r = kdb(capsys, pair_home, "diff", a, b, "--fail-on", "new-spills", "--only", "fired")
    fired = [k for k in doc["kernels"] if k["metrics"] and (k["metrics"]["vgpr_spill_count"]["delta"] or 0) > 0]
    assert r.code == 1 and f"fired new-spills: {len(fired)} kernels" in r.out
    head = r.out.split("status")[0]  # the fired rule and its kernels come before the table
    assert all(k["a_cache_key"][:6] in head for k in fired)
    r = kdb(capsys, pair_home, "diff", a, b, "--only", "everything")
    assert r.code == 2 and r.err.startswith("kdb: error: unknown --only")


@pytest.mark.slow  # outside the inner loop: 3 s on 2 cores (bench/test_suite.py)
def test_deep_view_shows_only_the_selected_kernels_within_a_limit(pair_home, capsys):
    a, b = PAIR
    r = kdb(capsys, pair_home, "diff", a, b, "--kernel", "*", "--limit", "2")
    assert r.code == 0
    assert "matches" in r.err and "showing the first 2" in r.err
    assert r.out.count("\n== ") == 2 and "vspill" not in r.out  # no table before the views
    r = kdb(capsys, pair_home, "diff", a, b, "--kernel", "attn_fwd_kernel", "--limit", "1")
    assert "@@ " in r.out and "hunk" in r.out
    doc = json.loads(kdb(capsys, pair_home, "diff", a, b, "--kernel", "*", "--format", "json").out)
    for v in doc["deep"]:
        text = json.dumps(v["triton_json_diff"]) + json.dumps(v["co_metadata_diff"])
        assert "'hash'" not in text and "extern_libs" not in text and '"/' not in text
    md = kdb(capsys, pair_home, "diff", a, b, "--kernel", "attn_fwd_kernel", "--format", "markdown").out
    assert "<details><summary><code>attn_fwd_kernel</code>" in md and "```diff" in md and len(md) <= 65_536


def test_show_accepts_the_short_key_the_diff_prints(pair_home, capsys):
    a, b = PAIR
    doc = json.loads(kdb(capsys, pair_home, "diff", a, b, "--format", "json").out)
    k = next(k for k in doc["kernels"] if k["a_cache_key"] and k["b_cache_key"])
    for tag, key in ((a, k["a_cache_key"]), (b, k["b_cache_key"])):
        for prefix in (key[:6], key[:6].lower()):
            r = kdb(capsys, pair_home, "show", tag, "--kernel", prefix)
            assert r.code == 0 and key in r.out, r.err
    r = kdb(capsys, pair_home, "show", a, "--kernel", "attn_fwd*", "--format", "json")
    assert r.code == 0 and {x["name"] for x in r.json()} == {"attn_fwd_kernel"}


@pytest.mark.parametrize(
    "args",
    [
        ["diff", "x"],
        ["diff", "x", "y", "--bogus"],
        ["ingest"],
        ["no-such-command"],
        ["show", "t", "--kernel"],
        ["diff", "x", "y", "--top", "many"],
        ["sql", "SELECT 1", "--format", "yaml"],
        [],
    ],
)
def test_every_usage_error_is_one_line_exit_2(tmp_path, args):
    code, out, err = _run(tmp_path / "home", *args)
    assert code == 2, (args, err)
    assert err.startswith("kdb: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Usage:" not in err


def test_an_empty_home_answers_empty(tmp_path):
    home = tmp_path / "empty"
    assert _run(home, "tags")[0] == 0
    code, out, _ = _run(home, "tags", "--format", "json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = _run(home, "sql", "SELECT count(*) AS n FROM kernels", "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": 0}]
    code, out, _ = _run(home, "show")
    assert code == 0 and "no snapshots yet" in out


@pytest.mark.slow  # outside the inner loop: 3 s on 2 cores (bench/test_suite.py)
def test_help_has_examples_and_readable_metavars():
    for command in ("", "ingest", "tags", "show", "reindex", "diff", "sql", "report", "cat", "export", "gc"):
        code, out, _ = _run(Path("/nonexistent"), *([command] if command else []), "--help")
        assert code == 0 and "<list[" not in out and "<str>" not in out.split("Options:")[-1], (command, out)
        if command in ("ingest", "tags", "show", "diff", "sql", "report"):
            assert "Examples:" in out, command


def test_shell_completion():
    code, out, _ = _run(Path("/nonexistent"), "--help")
    assert "--install-completion" in out and "--show-completion" in out
    # (`--show-completion` detects the shell from the process tree, which differs under CI: the completion
    # protocol itself is what is checked below)
    env = {**os.environ, "_KDB_COMPLETE": "complete_bash", "COMP_WORDS": "kdb di", "COMP_CWORD": "1"}
    p = subprocess.run([sys.executable, "-m", "kdb"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and p.stdout.split() == ["diff"]


@pytest.mark.slow  # outside the inner loop: 4 s on 2 cores (bench/test_suite.py)
def test_diff_of_a_directory_reports_progress_on_stderr(pair_home, unpack_snapshot):
    a, b = PAIR
    code, out, err = _run(pair_home, "diff", a, str(unpack_snapshot(b)))
    assert code == 0 and "kdb: ingesting" in err and "kdb: ingested" in err and "kdb: ingest" not in out


def test_sql_fits_the_terminal_with_a_row_limit(pair_home):
    code, out, _ = _run(pair_home, "sql", "SELECT * FROM kernels", "--max-rows", "5", env={"COLUMNS": "100"})
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 100 for line in lines)
    assert len(lines) == 1 + 5 + 1 and "rows, 5 shown (--max-rows 0 shows all)" in lines[-1] and "columns," in lines[-1]
    code, out, _ = _run(pair_home, "sql", "SELECT * FROM kernels", env={"COLUMNS": "100", "LINES": "100"}, tty=True)
    assert code == 0 and "40 shown" in out
    code, out, _ = _run(pair_home, "sql", "SELECT tag FROM kernels", "--format", "csv")
    assert len(out.splitlines()) > 40  # other formats are never cut


def test_json_text_is_what_pythons_encoder_writes_and_falls_back_where_orjson_refuses():
    """to_json (orjson) writes what json.dumps(indent=2) wrote before it, values kdb stores included; a
    document orjson refuses (a key that is not a string, an integer beyond 64 bits) still comes out."""
    from datetime import datetime
    from decimal import Decimal

    from kdb.render.tables import to_json

    doc = {
        "when": datetime(2026, 11, 24, 6, 36, 10, 123456),
        "day": datetime(2026, 11, 24),
        "size": Decimal("12.5"),
        "raw": b"\x00\xff",
        "nested": [{"a": 1, "b": None, "c": 0.1, "d": -3.5e-07, "e": "µs → ✓"}, [], {}],
        "tuple": (1, 2),
        "ratio": 0.999999,
    }
    expected = {
        **doc,
        "when": "2026-11-24T06:36:10.123456",
        "day": "2026-11-24T00:00:00",
        "size": 12.5,
        "raw": "00ff",
        "tuple": [1, 2],
    }
    assert to_json(doc) == python_json_text(expected)
    assert '"d": -3.5e-7,' in to_json(doc) and json.loads(to_json(doc))["nested"][0]["d"] == -3.5e-07
    assert json.loads(to_json({(1, 2): "tuple key", "big": 2**70})) == {"(1, 2)": "tuple key", "big": 2**70}
    assert to_json({"nan": float("nan")}) == '{\n  "nan": null\n}\n'

"""Why did it compile (issue 42): real offline compiles of a corpus kernel by the installed Triton (3.6.0 in CI), through
`kdb.capture:CacheManager`, each run a fresh process as a user's job would be (bench/capture_compile.py, the corpus's
stand-in driver, no GPU). One cause planted per test; `kdb capture misses` must name exactly it and nothing else.

The expected words come from what each test changed (the config it compiles, the file it edits, the environment),
the `def` line from the kernel file's own text, the releases from the interpreters' own `triton.__version__`.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPILE = ROOT / "bench" / "capture_compile.py"
LLD = "/usr/lib/llvm-22/bin/ld.lld"
SPEC = {"backend": "hip", "target": "gfx942", "warp_size": 64}
OTHER_RELEASE = "3.7.1"
LOCAL_TOOLCHAINS = Path("/var/tmp/kdb-toolchains")
TOOLCHAIN_CACHE = Path.home() / ".cache" / "kdb-tests" / "toolchains"  # as tests/test_replay.py's sweep test

pytestmark = [pytest.mark.slow, pytest.mark.triton]


def _vector_add() -> dict:
    from capture_compile import build_module  # bench/ (tests/conftest.py puts it on the path)

    config = build_module().configs_for("t3.6.0-gfx942")[0]
    assert config["kernel"] == "add_kernel" and config["constexprs"] == {"BLOCK": 1024}, config
    assert config["options"] == {"num_warps": 4} and config["sig"]["y_ptr"] == "*fp32", config
    return json.loads(json.dumps(config))


# Another release's interpreter runs the compile with kdb and its dependencies from this one's site-packages,
# appended after its own (its Triton comes first), as bench/capture_releases.py's venvs do with a .pth.
_OTHER_PYTHON = (
    "import runpy, site, sys\n"
    "for d in sys.argv[1].split(':'): site.addsitedir(d)\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


class Runs:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.home = work / "home"
        self.count = 0

    def compile(self, tag: str, config: dict, env: dict[str, str] | None = None, python: str | None = None) -> str:
        """`python`: another release's interpreter, or Python code run with this one (the compile's argv after it).
        The compile's cache folder (the key Triton's cache manager was made with, read by the driver)."""
        self.count += 1
        spec = self.work / f"spec-{self.count}.json"
        results = self.work / f"results-{self.count}.jsonl"
        spec.write_text(json.dumps({**SPEC, "configs": [config], "results": str(results), **self._src_root(config)}))
        full = {
            **os.environ,
            "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager",
            "KDB_HOME": str(self.home),
            "KDB_CAPTURE_TAG": tag,
            "TRITON_CACHE_DIR": str(self.work / "triton-cache"),
            "TRITON_HIP_LLD_PATH": LLD,
            "TRITON_HOME": str(self.work / "triton-home"),
            **(env or {}),
        }
        if python is None:
            command = [sys.executable, str(COMPILE), str(spec)]
        elif not python.startswith("/"):
            command = [sys.executable, "-c", python, str(COMPILE), str(spec)]
        else:
            host = ":".join([str(ROOT), *site.getsitepackages()])
            command = [python, "-c", _OTHER_PYTHON, host, str(COMPILE), str(spec)]
        done = subprocess.run(command, env=full, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        assert len(lines) == 1 and "cache_key" in lines[0], (lines, done.stderr[-2000:])
        assert "kdb capture: the key" not in done.stderr, done.stderr
        return lines[0]["cache_key"]

    def _src_root(self, config: dict) -> dict:
        return {"src_root": str(self.work / "src")} if (self.work / "src").is_dir() else {}

    def misses(self, tag: str, *more: str) -> subprocess.CompletedProcess[str]:
        return self.kdb("capture", "misses", "--tag", tag, *more)

    def kdb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kdb", "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def why(self, tag: str) -> list[list[str]]:
        done = self.misses(tag, "--format", "json")
        assert done.returncode == 0, done.stderr
        return [c["differs"] for c in json.loads(done.stdout)["compiles"]]


def _planted(tmp_path: Path, changed: dict, env: dict[str, str] | None = None) -> list[list[str]]:
    runs = Runs(tmp_path)
    runs.compile("base", _vector_add())
    assert runs.why("base") == [["first compile of this kernel"]]
    runs.compile("planted", changed, env)
    return runs.why("planted")


def test_a_constexpr_is_named(tmp_path):
    config = _vector_add()
    config["constexprs"]["BLOCK"] = 2048
    assert _planted(tmp_path, config) == [["constexpr BLOCK 1024→2048"]]


def test_an_argument_dtype_is_named(tmp_path):
    config = _vector_add()
    config["sig"]["y_ptr"] = "*fp16"  # the second argument
    assert _planted(tmp_path, config) == [["arg 1 dtype fp32→fp16"]]


def test_num_warps_is_named(tmp_path):
    config = _vector_add()
    config["options"]["num_warps"] = 8
    assert _planted(tmp_path, config) == [["num_warps 4→8"]]


def test_an_environment_knob_set_to_zero_is_named(tmp_path):
    assert "TRITON_DISABLE_LINE_INFO" not in os.environ
    assert _planted(tmp_path, _vector_add(), {"TRITON_DISABLE_LINE_INFO": "0"}) == [
        ['TRITON_DISABLE_LINE_INFO unset → "0"']
    ]


def _def_line(path: Path) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith("def add_kernel("))


def test_a_line_inserted_above_the_kernel_is_named(tmp_path):
    shutil.copytree(ROOT / "corpus" / "kernels", tmp_path / "src" / "kernels")
    kernel_file = tmp_path / "src" / "kernels" / "vector_add.py"
    runs = Runs(tmp_path)
    runs.compile("base", _vector_add())
    before = _def_line(kernel_file)
    kernel_file.write_text("# a comment line above the kernel\n" + kernel_file.read_text())
    after = _def_line(kernel_file)
    assert after == before + 1
    runs.compile("moved", _vector_add())
    assert runs.why("moved") == [[f"source moved from line {before} to {after}, body unchanged"]]


def test_a_rerun_with_no_change_reports_no_compile(tmp_path):
    runs = Runs(tmp_path)
    runs.compile("base", _vector_add())
    runs.compile("rerun", _vector_add())
    assert runs.why("rerun") == []
    done = runs.misses("rerun")
    assert done.returncode == 0 and done.stdout == "no compile in rerun\n", done.stdout + done.stderr


def test_compiles_after_warmup_fail_the_gate_and_warmup_compiles_do_not(tmp_path):
    runs = Runs(tmp_path)
    runs.compile("serve", _vector_add(), {"KDB_CAPTURE_PHASE": "warmup"})
    gate = runs.misses("serve", "--after-warmup", "--fail")
    assert gate.returncode == 0 and gate.stdout == "no compile after warm-up in serve\n", gate.stdout + gate.stderr
    config = _vector_add()
    config["constexprs"]["BLOCK"] = 512
    runs.compile("serve", config, {"KDB_CAPTURE_PHASE": "serving"})
    gate = runs.misses("serve", "--after-warmup", "--fail", "--format", "json")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    listed = json.loads(gate.stdout)["compiles"]
    assert [(c["phase"], c["after_warmup"], c["differs"]) for c in listed] == [
        ("serving", True, ["constexpr BLOCK 1024→512"])
    ]
    everything = json.loads(runs.misses("serve", "--format", "json").stdout)["compiles"]
    assert [c["after_warmup"] for c in everything] == [True, False]  # after warm-up first


def test_end_warmup_reaches_a_worker_started_later(tmp_path):
    """`kdb.capture.end_warmup()` in a parent: a compile worker it starts afterwards records the serving phase."""
    runs = Runs(tmp_path)
    runs.compile("pre", _vector_add())
    parent = (
        "import subprocess, sys\n"
        "import kdb.capture\n"
        "kdb.capture.end_warmup()\n"
        "sys.exit(subprocess.run([sys.executable, *sys.argv[1:]]).returncode)\n"
    )
    config = _vector_add()
    config["options"]["num_warps"] = 2
    runs.compile("pre", config, python=parent)
    gate = runs.misses("pre", "--after-warmup", "--fail", "--format", "json")
    assert gate.returncode == 1 and [c["differs"] for c in json.loads(gate.stdout)["compiles"]] == [
        ["num_warps 4→2"]
    ], gate.stdout


def _other_release_python() -> str:
    local = LOCAL_TOOLCHAINS / f"t{OTHER_RELEASE}" / "bin" / "python"
    if local.exists():
        return str(local)
    from kdb.replay import toolchains

    return toolchains.add(TOOLCHAIN_CACHE, OTHER_RELEASE).python  # made once (pip), then reused


@pytest.mark.sweep
def test_another_triton_release_is_named(tmp_path):
    import triton

    python = _other_release_python()
    version = subprocess.run(
        [python, "-c", "import triton; print(triton.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == OTHER_RELEASE != triton.__version__
    runs = Runs(tmp_path)
    runs.compile("base", _vector_add())
    runs.compile("next", _vector_add(), python=python)
    assert runs.why("next") == [[f"Triton {triton.__version__} → {version}"]]


def test_a_listener_the_user_set_keeps_being_called(tmp_path):
    """kdb's listener is chained in front of the user's: the user's sees every compile of the process, and kdb
    records every one (the first from its compile's own call: Triton read the listener before it loaded kdb)."""
    runs = Runs(tmp_path)
    seen = tmp_path / "seen.txt"
    second = _vector_add()
    second["constexprs"]["BLOCK"] = 256
    later = tmp_path / "second.json"
    later.write_text(json.dumps({**SPEC, "configs": [second], "results": str(tmp_path / "second.jsonl")}))
    user = (
        "import runpy, sys\n"
        "from triton import knobs\n"
        f"def mine(**kw): open({str(seen)!r}, 'a').write(str(kw['cache_hit']) + chr(10))\n"
        "knobs.compilation.listener = mine\n"
        "program = sys.argv[1]\n"
        f"for spec in (sys.argv[2], {str(later)!r}):\n"
        "    sys.argv = [program, spec]\n"
        "    try:\n"
        "        runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
    )
    runs.compile("mine", _vector_add(), python=user)
    assert "cache_key" in (tmp_path / "second.jsonl").read_text()
    assert seen.read_text().splitlines() == ["False", "False"]
    assert runs.why("mine") == [["first compile of this kernel"], ["constexpr BLOCK 1024→256"]]
    records = [
        json.loads(line)
        for path in (runs.home / "capture" / "keys" / "mine").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert [r["how"] for r in records] == ["compile frame", "listener"]


# -- issue 42 follow-ups: unknown said, stored records kept consistent, remote mode, the issue's words -------------
REMOTE = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "kdb.capture:RemoteBackend",
}


def _record_files(home: Path, tag: str) -> list[Path]:
    return sorted((home / "capture" / "keys" / tag).glob("*.jsonl"))


def _records(home: Path, tag: str) -> list[dict]:
    return [json.loads(line) for path in _record_files(home, tag) for line in path.read_text().splitlines()]


def test_a_record_line_left_half_written_is_counted_and_said(tmp_path):
    runs = Runs(tmp_path)
    runs.compile("base", _vector_add())
    config = _vector_add()
    config["constexprs"]["BLOCK"] = 2048
    runs.compile("later", config)
    assert runs.why("later") == [["constexpr BLOCK 1024→2048"]]
    (base,) = _record_files(runs.home, "base")
    data = base.read_bytes()
    base.write_bytes(data[: len(data) // 2])  # what a process killed in the middle of its write leaves
    document = json.loads(runs.misses("later", "--format", "json").stdout)
    assert document["damaged_records"] == 1
    assert [c["differs"] for c in document["compiles"]] == [["first compile of this kernel"]]
    said = "1 record line damaged (a process killed mid-write?), not read"
    for fmt in ("table", "markdown"):
        done = runs.misses("later", "--format", fmt)
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == said, done.stdout + done.stderr
    (later,) = _record_files(runs.home, "later")
    later.write_bytes(later.read_bytes()[:-9])
    done = runs.misses("later")
    assert done.stdout == f"no compile in later\n{said.replace('1 record line', '2 record lines')}\n", done.stdout


# What kdb records when a compile's source cannot be read (its group's metadata alone: keyparts' "metadata" route),
# made by kdb's own build_record from the real compile's metadata file in Triton's local folder (remote mode).
_FROM_METADATA = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from kdb.capture.keyparts import build_record\n"
    "meta = json.loads(Path(sys.argv[1]).read_text())\n"
    "print(json.dumps(build_record(None, meta, False, 'metadata', sys.argv[2]), sort_keys=True, default=str))\n"
)


def _seen_from_metadata_only(runs: Runs, tag: str, config: dict) -> dict:
    """Compile `config` with another home (its own records) and record it in `runs`'s home from its metadata."""
    other = Runs(runs.work / f"other-{tag}")
    other.work.mkdir()
    key = other.compile(tag, config, REMOTE)
    metadata = other.work / "triton-cache" / key / "add_kernel.json"
    line = subprocess.run(
        [sys.executable, "-c", _FROM_METADATA, str(metadata), key], capture_output=True, text=True, check=True
    ).stdout
    folder = runs.home / "capture" / "keys" / tag
    folder.mkdir(parents=True)
    (folder / "1.jsonl").write_text(line)
    return json.loads(line)


def test_a_part_a_release_does_not_expose_is_unknown_never_unchanged(tmp_path):
    import triton

    runs = Runs(tmp_path)
    base = runs.compile("base", _vector_add(), REMOTE)
    both = _vector_add()
    both["constexprs"]["BLOCK"] = 2048
    both["options"]["num_warps"] = 8
    record = _seen_from_metadata_only(runs, "hidden", both)
    hidden = record["not_exposed"]
    assert "constexprs" in hidden and "signature" in hidden, hidden
    unknown = f"{', '.join(hidden)} not exposed by Triton {triton.__version__}: cannot say whether they changed"
    assert runs.why("hidden") == [["num_warps 4→8", unknown]]  # the constexpr: unknown, not unchanged, not "none"
    only_block = _vector_add()
    only_block["constexprs"]["BLOCK"] = 512
    _seen_from_metadata_only(runs, "nothing", only_block)
    assert runs.why("nothing") == [
        [f"no recorded part differs from {base[:12]}: the key has a part kdb does not see", unknown]
    ]


def test_remote_backend_mode_records_the_first_compile_of_a_process(tmp_path):
    runs = Runs(tmp_path)
    runs.compile("first", _vector_add(), REMOTE)
    config = _vector_add()
    config["constexprs"]["BLOCK"] = 2048
    runs.compile("second", config, REMOTE)
    runs.compile("again", config, {**REMOTE, "TRITON_CACHE_DIR": str(tmp_path / "empty-local-cache")})
    assert runs.why("first") == [["first compile of this kernel"]]
    assert runs.why("second") == [["constexpr BLOCK 1024→2048"]]
    assert runs.why("again") == []  # served by kdb: a hit, recorded as one
    assert [(r["how"], r["hit"]) for t in ("first", "second", "again") for r in _records(runs.home, t)] == [
        ("compile frame", False),
        ("compile frame", False),
        ("compile frame", True),
    ]


def test_kdb_rm_and_gc_leave_no_records_of_a_tag_that_no_longer_exists(tmp_path):
    runs = Runs(tmp_path)
    runs.compile("kept", _vector_add())
    config = _vector_add()
    config["constexprs"]["BLOCK"] = 2048
    runs.compile("gone", config)
    runs.compile("orphan", config)
    assert _record_files(runs.home, "gone") and _record_files(runs.home, "orphan")
    done = runs.kdb("rm", "gone")
    assert done.returncode == 0, done.stderr
    assert not (runs.home / "capture" / "keys" / "gone").exists()
    # a snapshot removed without its records (as `kdb rm` did before): gc removes them once past its grace
    drop = (
        "import sys\nfrom pathlib import Path\nfrom kdb.store.home import Home\n"
        "from kdb.store.maintenance import remove_snapshot\n"
        "remove_snapshot(Home(Path(sys.argv[1])), 'orphan', 10.0)\n"
    )
    subprocess.run([sys.executable, "-c", drop, str(runs.home)], check=True, capture_output=True, text=True)
    assert runs.kdb("gc").returncode == 0 and _record_files(runs.home, "orphan")  # written within the grace
    done = runs.kdb("gc", "--grace", "0")
    assert done.returncode == 0, done.stderr
    assert not (runs.home / "capture" / "keys" / "orphan").exists()
    assert runs.why("kept") == [["first compile of this kernel"]]


def test_a_kernel_written_into_another_folder_is_named_in_the_issues_words(tmp_path):
    """As Inductor writes the same kernel into another cache folder: the body holds its folder's path."""
    homes = []
    for name in ("run1", "run2"):
        shutil.copytree(ROOT / "corpus" / "kernels", tmp_path / name / "src" / "kernels")
        kernel_file = tmp_path / name / "src" / "kernels" / "vector_add.py"
        lines = kernel_file.read_text().splitlines(keepends=True)
        at = _def_line(kernel_file)
        lines.insert(at, f"    # written into {kernel_file.parent}\n")
        kernel_file.write_text("".join(lines))
        homes.append(Runs(tmp_path / name))
    homes[1].home = homes[0].home
    homes[0].compile("run1", _vector_add())
    homes[1].compile("run2", _vector_add())
    assert homes[1].why("run2") == [["debug locations differ only in a path"]]

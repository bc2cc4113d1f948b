"""`kdb capture env|status` and the spool's name rules, without compiling (the inner loop's share of kdb.capture;
tests/test_capture.py compiles real kernels with Triton, outside it)."""

from __future__ import annotations

import shlex

import pytest
from helpers import kdb

from kdb.errors import ExitCode, UsageError
from kdb.store.spool import SpoolLayout, check_name, is_kernel_file


def _exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        assert line.startswith("export "), line
        name, _, value = line.removeprefix("export ").partition("=")
        out[name] = shlex.split(value)[0]
    return out


def test_env_names_the_cache_manager_home_and_tag(capsys, tmp_path) -> None:
    r = kdb(capsys, tmp_path / "home", "capture", "env", "--tag", "nightly-1")
    assert r.code == 0, r.err
    assert _exports(r.out) == {
        "TRITON_CACHE_MANAGER": "kdb.capture:CacheManager",
        "KDB_HOME": str((tmp_path / "home").resolve()),
        "KDB_CAPTURE_TAG": "nightly-1",
    }
    remote = _exports(kdb(capsys, tmp_path / "home", "capture", "env", "--remote", "--tag", "t").out)
    assert remote["TRITON_CACHE_MANAGER"] == "triton.runtime.cache:RemoteCacheManager"
    assert remote["TRITON_REMOTE_CACHE_BACKEND"] == "kdb.capture:RemoteBackend"


def test_a_tag_that_cannot_name_a_folder_is_refused_in_one_line(capsys, tmp_path) -> None:
    r = kdb(capsys, tmp_path / "home", "capture", "env", "--tag", "../escape")
    assert r.code == ExitCode.USAGE and r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and "KDB_CAPTURE_TAG" in r.err


def test_status_of_a_tag_nothing_captured(capsys, tmp_path) -> None:
    r = kdb(capsys, tmp_path / "home", "capture", "status", "--tag", "empty")
    assert r.code == 0, r.err
    assert r.out.startswith("empty: 0 whole folders wait to be recorded"), r.out
    layout = SpoolLayout(tmp_path / "capture", "empty")
    assert layout.waiting() == set() and list(layout.whole_folders()) == []


@pytest.mark.parametrize("name", ["a/b.json", "..", "", "x" * 300, "with space.ttir", "back\\slash"])
def test_spool_refuses_a_file_name_that_is_not_a_cache_file(name: str) -> None:
    with pytest.raises(UsageError):
        check_name(name)


def test_kernel_files_are_what_makes_a_folder_a_kernel_folder() -> None:
    assert check_name("matmul_kernel.hsaco") == "matmul_kernel.hsaco"
    assert all(is_kernel_file(f"k.{s}") for s in ("ttir", "ttgir", "llir", "ptx", "cubin", "amdgcn", "hsaco", "json"))
    assert not is_kernel_file("k.autotune.json") and not is_kernel_file("cuda_utils.so")


def test_processes_exiting_together_start_one_detached_commit(tmp_path, monkeypatch) -> None:
    """A serving process that only had hits leaves its exit commit to a detached `kdb capture commit`; while one
    started by another process still runs, no second one starts (a fleet exiting at once starts one, not one each)."""
    import os
    import time

    from kdb.capture.recording import detach_commit

    monkeypatch.setenv("KDB_HOME", str(tmp_path / "home"))
    layout = SpoolLayout(tmp_path / "home" / "capture", "fleet")
    first = detach_commit(layout)
    second = detach_commit(layout)  # the first is still starting its interpreter: alive
    assert first is not None
    assert second is None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(first, 0)
        except ProcessLookupError:
            break
        if os.waitpid(first, os.WNOHANG) != (0, 0):  # our own child here: reaped once it ended
            break
        time.sleep(0.05)
    third = detach_commit(layout)  # the first ended: the next exiting process starts its own
    assert third is not None and third != first
    os.waitpid(third, 0)

"""Crash harness: SIGKILL kdb writers at random moments and check that nothing is lost.

    python bench/crash_harness.py --trials 25 --seed 1
    python bench/crash_harness.py --replay ingest:1234567    # re-run one trial from its printed seed

Three kinds of trial, on a real corpus snapshot (the smallest AMD one unless --snapshot says otherwise):

ingest  `kdb ingest CACHE --tag T -q` on a fresh home, killed at a random moment. Then: `kdb verify`
        exits 0; the catalog holds the complete snapshot (kernel and file counts equal the manifest)
        or none of it; every object under objects/ whose name is a hash decompresses and hashes to
        that name (`.tmp-*` temporaries are allowed); no process of the killed run survives it; the
        same ingest then succeeds (with --replace where the snapshot had been recorded).
rm      a home with two snapshots (`full` = the cache, `half` = every other kernel folder of it);
        `kdb rm full` killed at a random moment. Then: verify clean, `full` complete or absent, `half`
        complete; `kdb rm full` + `kdb gc` finish; `half` exports byte-identical.
gc      the same home after a completed `kdb rm full`; `kdb gc --compact` (which also rewrites the
        catalog into a copy and renames it over the old one) killed at a random moment. Then: verify
        clean, `half` complete; `kdb gc` finishes and leaves no unreferenced blob and no temporary
        (verify counts a leftover catalog copy among them); `half` exports byte-identical.

Only the kdb process itself is killed (as a crash or the OOM killer would); its worker processes
must not outlive it. Every trial has its own seed, printed with the kill delay, so any failure can
be replayed. "Traceback" in the stderr of any run that was not killed counts as a traceback seen.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import zstandard

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
KINDS = ("ingest", "rm", "gc")
TAG = "crash"
COMMAND_TIMEOUT_S = 180


def load_manifest() -> dict:
    return json.loads((CORPUS / "manifest.json").read_text())


def smallest_amd_snapshot(manifest: dict) -> str:
    amd = [
        (entry["archive_bytes"], name) for name, entry in manifest["snapshots"].items() if entry.get("backend") == "hip"
    ]
    if not amd:
        raise SystemExit("corpus/manifest.json lists no AMD snapshot")
    return min(amd)[1]


def unpack(name: str, dest: Path, manifest: dict) -> Path:
    sys.path.insert(0, str(CORPUS))
    from unpack import unpack_archive

    return unpack_archive(CORPUS / manifest["snapshots"][name]["archive"], dest)


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _plain_blob(path: Path) -> bytes:
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes())) as reader:
        return reader.read()


def _dictionaries(objects: Path, problems: list[str]) -> dict[int, zstandard.ZstdCompressionDict]:
    """The store's dictionary index as its format is documented (kdb/store/blobs.py): empty files named
    KIND-ID-SIZE-HASH under objects/dictionaries/, each naming an intact blob compressed without one."""
    found: dict[int, zstandard.ZstdCompressionDict] = {}
    index = objects / "dictionaries"
    if not index.exists():
        return found
    for entry in sorted(index.iterdir()):
        parts = entry.name.rsplit("-", 3)
        if len(parts) != 4:
            problems.append(f"store: unexpected dictionary entry {entry.name}")
            continue
        digest = parts[3]
        blob = objects / digest[:2] / digest[2:]
        try:
            data = _plain_blob(blob)
        except (OSError, zstandard.ZstdError) as exc:
            problems.append(f"store: dictionary entry {entry.name} names an unreadable blob ({exc})")
            continue
        if hashlib.sha256(data).hexdigest() != digest or len(data) != int(parts[2]):
            problems.append(f"store: dictionary entry {entry.name} names a blob with other content")
            continue
        found[int(parts[1], 16)] = zstandard.ZstdCompressionDict(data)
    return found


def check_store(objects: Path) -> list[str]:
    """Independent of kdb: every object named by a hash must decompress (with the dictionary its frame
    names, if any) to bytes with that hash."""
    problems: list[str] = []
    if not objects.exists():
        return problems
    dictionaries = _dictionaries(objects, problems)
    for shard in sorted(objects.iterdir()):
        if shard.name == "dictionaries":
            continue
        if not shard.is_dir():
            problems.append(f"store: unexpected file {shard.name} at the top of objects/")
            continue
        for entry in sorted(shard.iterdir()):
            if entry.name.startswith(".tmp-"):
                continue  # an interrupted write's temporary: allowed, gc removes it
            name = shard.name + entry.name
            if len(name) != 64 or any(c not in "0123456789abcdef" for c in name):
                problems.append(f"store: unexpected object {shard.name}/{entry.name}")
                continue
            try:
                payload = entry.read_bytes()
                dict_id = zstandard.get_frame_parameters(payload).dict_id
                if dict_id and dict_id not in dictionaries:
                    problems.append(f"store: blob {name} needs dictionary {dict_id}, which the index lacks")
                    continue
                decompressor = zstandard.ZstdDecompressor(dict_data=dictionaries.get(dict_id))
                with decompressor.stream_reader(io.BytesIO(payload)) as reader:
                    data = reader.read()
            except zstandard.ZstdError as exc:
                problems.append(f"store: partial or damaged blob under its final name {name} ({exc})")
                continue
            if hashlib.sha256(data).hexdigest() != name:
                problems.append(f"store: blob {name} does not hash to its name (partial write?)")
    return problems


def snapshot_state(home: Path, tag: str) -> dict | None:
    """None when the catalog holds no snapshot `tag`; else its recorded counts and its actual rows."""
    path = home / "catalog.duckdb"
    if not path.exists():
        return None
    con = duckdb.connect(str(path), read_only=True)
    try:
        try:
            row = con.execute(
                "SELECT snapshot_id, kernel_count, file_count FROM snapshots WHERE tag = ?", [tag]
            ).fetchone()
        except duckdb.CatalogException:
            return None  # killed before the schema was created
        if row is None:
            return None
        sid, kernel_count, file_count = row
        files = con.execute("SELECT count(*) FROM files WHERE snapshot_id = ?", [sid]).fetchone()[0]
        kernels = con.execute("SELECT count(*) FROM kernels WHERE snapshot_id = ?", [sid]).fetchone()[0]
        return {"kernel_count": kernel_count, "file_count": file_count, "files": files, "kernels": kernels}
    finally:
        con.close()


@dataclass
class Report:
    trials: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    killed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    inconsistencies: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    seeds: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.inconsistencies and not self.tracebacks

    def summary(self) -> str:
        runs = ", ".join(f"{k}: {self.trials[k]} ({self.killed[k]} killed mid-run)" for k in KINDS)
        lines = [
            f"trials run: {sum(self.trials.values())} ({runs})",
            f"inconsistent states seen: {len(self.inconsistencies)}",
            f"tracebacks seen: {len(self.tracebacks)}",
        ]
        lines += [f"  INCONSISTENT {x}" for x in self.inconsistencies]
        lines += [f"  TRACEBACK {x}" for x in self.tracebacks]
        return "\n".join(lines)


class Harness:
    def __init__(self, workdir: Path, snapshot: str | None = None, log: Callable[[str], None] = print) -> None:
        self.manifest = load_manifest()
        self.snapshot = snapshot or smallest_amd_snapshot(self.manifest)
        self.entry = self.manifest["snapshots"][self.snapshot]
        self.work = workdir
        self.log = log
        self.report = Report()
        self.env = {k: v for k, v in os.environ.items() if k != "KDB_DEBUG"}
        self._homes = 0
        self._finished_in: float | None = None  # how long the last kill_during's command ran, when it beat its kill

    # -- running kdb -----------------------------------------------------------------------------
    def _argv(self, home: Path, args: tuple[str, ...]) -> list[str]:
        return [sys.executable, "-m", "kdb", "--home", str(home), *args]

    def kdb(self, context: str, home: Path, *args: str) -> subprocess.CompletedProcess:
        """Run kdb to completion in this process (the checks; fast); a bug's message is recorded as a traceback."""
        from kdb.cli import run as kdb_run

        out, err = (
            io.TextIOWrapper(io.BytesIO(), write_through=True),
            io.TextIOWrapper(io.BytesIO(), write_through=True),
        )
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            code = kdb_run(["--home", str(home), *args])
        finally:
            sys.stdout, sys.stderr = saved
        stdout, stderr = (s.buffer.getvalue().decode("utf-8", "replace") for s in (out, err))
        if "Traceback" in stderr or "internal error" in stderr:
            self.report.tracebacks.append(f"{context}: `kdb {' '.join(args)}`: {stderr.strip()[-400:]}")
        return subprocess.CompletedProcess(["kdb", *args], code, stdout, stderr)

    def kdb_process(self, context: str, home: Path, *args: str) -> subprocess.CompletedProcess:
        """Run kdb to completion as its own process; a traceback or a hang is recorded against `context`."""
        try:
            proc = subprocess.run(
                self._argv(home, args),
                check=False,
                capture_output=True,
                text=True,
                env=self.env,
                timeout=COMMAND_TIMEOUT_S,
                cwd=self.work,
            )
        except subprocess.TimeoutExpired:
            self.report.inconsistencies.append(f"{context}: `kdb {' '.join(args)}` hung for {COMMAND_TIMEOUT_S} s")
            return subprocess.CompletedProcess(args, -1, "", "")
        if "Traceback" in proc.stderr:
            self.report.tracebacks.append(f"{context}: `kdb {' '.join(args)}`: {proc.stderr.strip()[-400:]}")
        return proc

    def kill_during(self, context: str, home: Path, delay: float, *args: str) -> bool:
        """Start kdb, SIGKILL it after `delay` seconds; True when it was killed before finishing."""
        proc = subprocess.Popen(
            self._argv(home, args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.work,
            start_new_session=True,
        )
        started = time.monotonic()
        try:
            proc.wait(timeout=delay)
            killed = False
            # A command that beat its kill shows the window was too wide for this machine's load right
            # now: later draws of this kind use the shorter duration (the setup's timing ran under other load).
            self._finished_in = time.monotonic() - started
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)  # only kdb itself, not its process group
            killed = True
        _, err = proc.communicate()
        if not killed:
            if "Traceback" in err:
                self.report.tracebacks.append(f"{context}: `kdb {' '.join(args)}`: {err.strip()[-400:]}")
            if proc.returncode != 0:
                self.report.inconsistencies.append(
                    f"{context}: uninterrupted `kdb {' '.join(args)}` exited {proc.returncode}: {err.strip()[-300:]}"
                )
        self._reap_group(context, proc.pid)
        return killed

    def _reap_group(self, context: str, pgid: int) -> None:
        """Processes of the killed run (its workers) must die with it; any that linger are reported, then killed."""
        deadline = time.monotonic() + 2.0
        while True:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self.report.inconsistencies.append(f"{context}: processes of the killed run outlived it (orphaned workers)")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    # -- fixtures --------------------------------------------------------------------------------
    def new_home(self) -> Path:
        self._homes += 1
        return self.work / f"home-{self._homes}"

    def setup(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.cache = unpack(self.snapshot, self.work / "cache", self.manifest)
        # `half`: every other top-level folder of the same real cache (and its top-level files).
        self.half = self.work / "half"
        folders = sorted(p for p in self.cache.iterdir() if p.is_dir())
        self.half.mkdir()
        for p in self.cache.iterdir():
            if p.is_file():
                shutil.copy2(p, self.half / p.name)
        for p in folders[::2]:
            shutil.copytree(p, self.half / p.name, symlinks=True)
        self.expected_full = (self.entry["kernel_count"], self.entry["file_count"])

        # Calibrate: the uninterrupted commands, timed, on the homes the trials start from.
        self.startup_s = float("inf")  # interpreter start and imports, before any command runs
        for _ in range(2):
            started = time.monotonic()
            self.expect_ok("setup", self.kdb_process("setup", self.work, "--version"))
            self.startup_s = min(self.startup_s, time.monotonic() - started)
        home = self.new_home()
        started = time.monotonic()
        self.expect_ok("setup", self.kdb_process("setup", home, "ingest", str(self.cache), "--tag", TAG, "-q"))
        self.ingest_s = time.monotonic() - started
        self.expect_complete("setup", home, TAG, self.expected_full)

        self.base = self.work / "base-home"
        started = time.monotonic()
        self.expect_ok("setup", self.kdb_process("setup", self.base, "ingest", str(self.cache), "--tag", "full", "-q"))
        self.ingest_s = min(self.ingest_s, time.monotonic() - started)  # the first run pays for cold caches
        proc = self.kdb_process("setup", self.base, "ingest", str(self.half), "--tag", "half", "--format", "json")
        self.expect_ok("setup", proc)
        summary = json.loads(proc.stdout)
        self.expected_half = (summary["kernels"], summary["files"])
        self.half_hashes = tree_hashes(self.half)

        # rm and gc take a few tenths of a second, so one slow first run would put most kills after the
        # command ended: the shortest of three runs sets the window the kill delays are drawn from.
        self.rm_s = self.gc_s = float("inf")
        for _ in range(3):
            home = self.copy_base()
            started = time.monotonic()
            self.expect_ok("setup", self.kdb_process("setup", home, "rm", "full"))
            self.rm_s = min(self.rm_s, time.monotonic() - started)
            started = time.monotonic()
            self.expect_ok("setup", self.kdb_process("setup", home, "gc", "--compact"))
            self.gc_s = min(self.gc_s, time.monotonic() - started)
            shutil.rmtree(home, ignore_errors=True)
        if self.report.inconsistencies:
            raise RuntimeError("setup failed:\n" + self.report.summary())
        self.log(
            f"snapshot {self.snapshot}: {self.expected_full[0]} kernels, {self.expected_full[1]} files; "
            f"half: {self.expected_half[0]} kernels; uninterrupted ingest {self.ingest_s:.2f} s, "
            f"rm {self.rm_s:.2f} s, gc {self.gc_s:.2f} s, interpreter start {self.startup_s:.2f} s"
        )

    def copy_base(self) -> Path:
        home = self.new_home()
        shutil.copytree(self.base, home)
        return home

    # -- checks ----------------------------------------------------------------------------------
    def bad(self, context: str, what: str) -> None:
        self.report.inconsistencies.append(f"{context}: {what}")

    def expect_ok(self, context: str, proc: subprocess.CompletedProcess, allowed: tuple[int, ...] = (0,)) -> bool:
        if proc.returncode not in allowed:
            self.bad(
                context,
                f"`{' '.join(map(str, proc.args[-6:]))}` exited {proc.returncode}: {proc.stderr.strip()[-300:]}",
            )
            return False
        return True

    def expect_verify_clean(self, context: str, home: Path, *, no_orphans: bool = False) -> None:
        if not (home / "catalog.duckdb").exists():
            return  # killed before the catalog was created: nothing recorded, nothing to verify
        proc = self.kdb(context, home, "verify", "--format", "json")
        if not self.expect_ok(context, proc):
            return
        report = json.loads(proc.stdout)
        if no_orphans and (report["unreferenced_blobs"] or report["temporaries"]):
            self.bad(
                context,
                f"after a completed gc: {report['unreferenced_blobs']} unreferenced blobs, "
                f"{report['temporaries']} temporaries remain",
            )

    def expect_store_intact(self, context: str, home: Path) -> None:
        for problem in check_store(home / "objects"):
            self.bad(context, problem)

    def state(self, context: str, home: Path, tag: str) -> dict | None:
        try:
            return snapshot_state(home, tag)
        except duckdb.Error as exc:
            self.bad(context, f"catalog unreadable: {str(exc).splitlines()[0]}")
            return None

    def expect_complete(self, context: str, home: Path, tag: str, expected: tuple[int, int]) -> None:
        state = self.state(context, home, tag)
        if state is None:
            self.bad(context, f"snapshot {tag!r} missing")
        else:
            self.expect_whole(context, tag, state, expected)

    def expect_whole(self, context: str, tag: str, state: dict, expected: tuple[int, int]) -> None:
        kernels, files = expected
        if (state["kernel_count"], state["kernels"], state["file_count"], state["files"]) != (
            kernels,
            kernels,
            files,
            files,
        ):
            self.bad(context, f"snapshot {tag!r} is partial: {state} (expected {kernels} kernels, {files} files)")

    def expect_export_identical(self, context: str, home: Path, tag: str, hashes: dict[str, str]) -> None:
        dest = self.work / f"export-{self._homes}"
        if (
            self.expect_ok(context, self.kdb(context, home, "export", tag, str(dest), "--verbatim"))
            and tree_hashes(dest) != hashes
        ):
            self.bad(context, f"export of {tag!r} is not byte-identical to its source")
        shutil.rmtree(dest, ignore_errors=True)

    # -- trials ----------------------------------------------------------------------------------
    def _delay(self, rng: random.Random, duration: float) -> float:
        # A fifth of the kills during interpreter start; the rest while the command runs, half of those
        # in the last 40 % of it, where the catalog commit (or gc's unlinking) happens.
        start, r = min(self.startup_s, 0.9 * duration), rng.random()
        if r < 0.2:
            return rng.uniform(0.0, start)
        if r < 0.6:
            return rng.uniform(start, 1.05 * duration)
        return rng.uniform(start + 0.6 * (duration - start), 1.05 * duration)

    def trial(self, kind: str, seed: int) -> None:
        before = len(self.report.inconsistencies) + len(self.report.tracebacks)
        rng = random.Random(seed)
        context = f"{kind}:{seed}"
        self.report.seeds.append(context)
        self._finished_in = None
        killed, delay = getattr(self, f"_{kind}_trial")(context, rng)
        if self._finished_in is not None:
            setattr(self, f"{kind}_s", min(getattr(self, f"{kind}_s"), self._finished_in))
        self.report.trials[kind] += 1
        self.report.killed[kind] += killed
        found = len(self.report.inconsistencies) + len(self.report.tracebacks) - before
        self.log(
            f"{kind:6} seed={seed:<10} kill after {delay:5.2f} s: "
            f"{'killed' if killed else 'finished first'}; {'OK' if not found else f'{found} FINDINGS'}"
        )

    def _ingest_trial(self, context: str, rng: random.Random) -> tuple[bool, float]:
        home = self.new_home()
        delay = self._delay(rng, self.ingest_s)
        killed = self.kill_during(context, home, delay, "ingest", str(self.cache), "--tag", TAG, "-q")
        self.expect_verify_clean(context, home)
        self.expect_store_intact(context, home)
        state = self.state(context, home, TAG)
        if state is not None:
            self.expect_whole(context, TAG, state, self.expected_full)
        elif not killed:
            self.bad(context, "an ingest that finished recorded no snapshot")
        # The same ingest succeeds now: no lock left held, no half-made catalog in the way.
        again = ["--wait", "20", "ingest", str(self.cache), "--tag", TAG, "-q"] + (["--replace"] if state else [])
        self.expect_ok(context, self.kdb_process(context, home, *again))
        self.expect_complete(context, home, TAG, self.expected_full)
        self.expect_verify_clean(context, home)
        shutil.rmtree(home, ignore_errors=True)
        return killed, delay

    def _rm_trial(self, context: str, rng: random.Random) -> tuple[bool, float]:
        home = self.copy_base()
        delay = self._delay(rng, self.rm_s)
        killed = self.kill_during(context, home, delay, "rm", "full")
        self.expect_verify_clean(context, home)
        self.expect_store_intact(context, home)
        state = self.state(context, home, "full")
        if state is not None:
            self.expect_whole(context, "full", state, self.expected_full)
            if not killed:
                self.bad(context, "an rm that finished left its snapshot")
        self.expect_complete(context, home, "half", self.expected_half)
        self.expect_ok(
            context, self.kdb(context, home, "--wait", "20", "rm", "full"), allowed=(0, 4) if state is None else (0,)
        )
        self.expect_ok(context, self.kdb(context, home, "--wait", "20", "gc"))
        self.expect_verify_clean(context, home, no_orphans=True)
        self.expect_export_identical(context, home, "half", self.half_hashes)
        shutil.rmtree(home, ignore_errors=True)
        return killed, delay

    def _gc_trial(self, context: str, rng: random.Random) -> tuple[bool, float]:
        home = self.copy_base()
        self.expect_ok(context, self.kdb(context, home, "rm", "full"))
        delay = self._delay(rng, self.gc_s)
        killed = self.kill_during(context, home, delay, "gc", "--compact")  # --compact: the catalog copy is killed too
        self.expect_verify_clean(context, home)
        self.expect_store_intact(context, home)
        if self.state(context, home, "full") is not None:
            self.bad(context, "gc brought back a removed snapshot")
        self.expect_complete(context, home, "half", self.expected_half)
        self.expect_export_identical(context, home, "half", self.half_hashes)
        self.expect_ok(context, self.kdb(context, home, "--wait", "20", "gc"))
        self.expect_verify_clean(context, home, no_orphans=True)
        self.expect_export_identical(context, home, "half", self.half_hashes)
        shutil.rmtree(home, ignore_errors=True)
        return killed, delay


def run(
    trials: dict[str, int],
    seed: int,
    *,
    workdir: Path | None = None,
    snapshot: str | None = None,
    replay: list[tuple[str, int]] | None = None,
    min_killed: dict[str, int] | None = None,
    log: Callable[[str], None] = print,
) -> Report:
    """Run the trials (kind -> count) with seeds drawn from `seed`, or exactly the `replay` (kind, seed) list.

    `min_killed` (kind -> count): where fewer trials of a kind than that were killed before finishing
    (a fast machine can finish a short rm before most drawn delays), run more trials of it, with
    seeds drawn from the same master, up to four times the planned number."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="kdb-crash-")
        workdir = Path(tmp.name)
    try:
        harness = Harness(workdir, snapshot, log)
        harness.setup()
        master = random.Random(seed)
        if replay is None:
            replay = [(kind, master.randrange(2**31)) for kind in KINDS for _ in range(trials.get(kind, 0))]
        log(f"master seed {seed}; trial seeds: {' '.join(f'{k}:{s}' for k, s in replay)}")
        for kind, trial_seed in replay:
            harness.trial(kind, trial_seed)
        for kind, wanted in (min_killed or {}).items():
            cap = 4 * max(trials.get(kind, 0), wanted)
            while harness.report.killed[kind] < wanted and harness.report.trials[kind] < cap:
                extra = master.randrange(2**31)
                log(f"too few {kind} trials killed mid-run ({harness.report.killed[kind]} of {wanted}): one more")
                harness.trial(kind, extra)  # its seed is in the trial's log line
        return harness.report
    finally:
        if tmp is not None:
            tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=25, help="ingest trials (and gc/rm trials unless given)")
    parser.add_argument("--gc-trials", type=int, default=None)
    parser.add_argument("--rm-trials", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None, help="master seed (default: random, printed)")
    parser.add_argument("--snapshot", default=None, help="corpus snapshot (default: the smallest AMD one)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep homes here instead of a temporary dir")
    parser.add_argument("--replay", action="append", default=None, metavar="KIND:SEED", help="run exactly this trial")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    trials = {
        "ingest": args.trials,
        "rm": args.trials if args.rm_trials is None else args.rm_trials,
        "gc": args.trials if args.gc_trials is None else args.gc_trials,
    }
    replay = None
    if args.replay:
        replay = [(k, int(s)) for k, _, s in (r.partition(":") for r in args.replay)]
        if any(k not in KINDS for k, _ in replay):
            parser.error(f"--replay KIND must be one of {', '.join(KINDS)}")
    started = time.monotonic()
    report = run(
        trials, seed, workdir=args.workdir, snapshot=args.snapshot, replay=replay, log=lambda s: print(s, flush=True)
    )
    print(report.summary())
    print(f"({time.monotonic() - started:.0f} s)")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Record the tuning-option defaults each Triton release applies, by asking the release itself.

For every Triton venv given, runs (inside that venv) the backend's own `parse_options({})` for a
GPU target of each backend and prints the options it applies when the user asks for nothing.
That is each release's own answer (dataclass defaults alone are not: e.g. 3.9's CUDAOptions
declares `enable_fp_fusion = False` and parse_options replaces it from a knob that defaults to True).

    python scripts/release_defaults.py /var/tmp/kdb-corpus/venvs/t* > kdb/triton/release_defaults.json
    python scripts/release_defaults.py --merge kdb/triton/release_defaults.json VENV... > new.json  # some releases

Each release is asked for every target it accepts among TARGETS (a target it refuses records `__error__`).

kdb's identity compares tuning options as "equal, or each at its own release's default"; the
table this writes is where those defaults come from (kdb.triton.identity loads it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import json, dataclasses, sys
import triton
try:
    from triton.backends.compiler import GPUTarget
    legacy = False
except ImportError:
    legacy = True
out = {"triton_version": triton.__version__.split("+")[0], "backends": {}}
def plain(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (tuple, list)):
        return [plain(x) for x in v]
    return repr(v)
targets = [("hip", "gfx942", 64), ("hip", "gfx950", 64), ("hip", "gfx90a", 64), ("hip", "gfx908", 64),
           ("hip", "gfx1030", 32), ("hip", "gfx1100", 32), ("hip", "gfx1151", 32), ("hip", "gfx1201", 32),
           ("hip", "gfx1250", 32), ("cuda", 80, 32), ("cuda", 90, 32), ("cuda", 100, 32), ("cuda", 120, 32)]
for backend, arch, warp in targets:
    try:
        if legacy:  # 2.3.x: NVIDIA only, the backend takes a (device type, capability) tuple
            if backend != "cuda":
                continue
            from triton.compiler.backends.cuda import CUDABackend
            opts = CUDABackend((backend, arch)).parse_options({})
        else:
            if backend == "hip":
                from triton.backends.amd.compiler import HIPBackend as B
            else:
                from triton.backends.nvidia.compiler import CUDABackend as B
            opts = B(GPUTarget(backend, arch, warp)).parse_options({})
        values = {f.name: plain(getattr(opts, f.name)) for f in dataclasses.fields(opts)}
        out["backends"].setdefault(backend, {})[str(arch)] = values
    except Exception as exc:
        out["backends"].setdefault(backend, {})[str(arch)] = {"__error__": f"{type(exc).__name__}: {exc}"[:200]}
print(json.dumps(out))
"""


def main(argv: list[str]) -> int:
    table = {}
    venvs = argv
    if argv[:1] == ["--merge"]:  # keep the releases of an existing table that no venv given here re-asks
        table = json.loads(Path(argv[1]).read_text())
        venvs = argv[2:]
    for venv in sorted(venvs):
        py = Path(venv) / "bin" / "python"
        proc = subprocess.run(
            [str(py), "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            env={"PATH": "/usr/bin:/bin", "TRITON_HIP_LLD_PATH": "/usr/lib/llvm-22/bin/ld.lld"},
        )
        if proc.returncode != 0:
            print(
                f"{venv}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}",
                file=sys.stderr,
            )
            continue
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
        table[doc["triton_version"]] = doc["backends"]
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env bash
# Install kdb and run its main job on two bundled corpus snapshots (a Triton 3.3.1 -> 3.4.0 upgrade on gfx942):
# ingest both, list them, ask the catalog which kernels spill, and diff the upgrade.
set -euo pipefail
cd "$(dirname "$0")/.."
pip install -q -e '.[nvidia]'  # NVIDIA's nvdisasm/cuobjdump wheels: SASS mixes for NVIDIA caches
work=$(mktemp -d)
export KDB_HOME="$work/home"
python corpus/unpack.py t3.3.1-gfx942 "$work/t3.3.1" >/dev/null
python corpus/unpack.py t3.4.0-gfx942 "$work/t3.4.0" >/dev/null
kdb ingest "$work/t3.3.1" --tag t3.3.1-gfx942 --label triton=3.3.1
kdb ingest "$work/t3.4.0" --tag t3.4.0-gfx942 --label triton=3.4.0
kdb tags
kdb sql "SELECT tag, name, vgpr_count, vgpr_spill_count, scratch_bytes, occupancy_llvm, occupancy
         FROM kernels WHERE scratch_bytes > 0 ORDER BY scratch_bytes DESC LIMIT 10"
if kdb diff --help >/dev/null 2>&1; then kdb diff t3.3.1-gfx942 t3.4.0-gfx942 || true; fi
# What to run next: each line works in this shell's environment (the same venv) once KDB_HOME is exported.
cat <<EOF

kdb home used: $KDB_HOME. Go on with:
  export KDB_HOME=$KDB_HOME
  kdb report t3.3.1-gfx942 t3.4.0-gfx942 --output upgrade.html   # the diff as an HTML page with plots
  kdb diff t3.3.1-gfx942 t3.4.0-gfx942 --kernel 'attn_fwd*'       # one kernel's facts, mix and ISA hunks
  kdb sql "SELECT tag, grp, sum(count) AS n FROM instr_mix_by_loop WHERE loop_depth > 0 GROUP BY ALL ORDER BY n DESC"
EOF

"""Examples shown at the end of `kdb COMMAND --help` (`\\b` keeps click from rewrapping them)."""

SHOW_EPILOG = """\b
Examples:
  kdb show                          # the snapshots (as kdb tags)
  kdb show t3.4.0-gfx942            # file kinds and problems of one snapshot
  kdb show t3.4.0-gfx942 -k S3B22B  # one kernel by the 6-character key kdb diff prints
  kdb show t3.4.0-gfx942 -k 'matmul*' --format json
"""

SQL_EPILOG = """\b
Examples:
  kdb sql "SELECT tag, name, vgpr_count, occupancy FROM kernels WHERE scratch_bytes > 0"
  kdb sql "SELECT * FROM kernels" --max-rows 0 --format csv > kernels.csv
  (tables and columns: schema/README.md)
"""

DIFF_EPILOG = """\b
Examples:
  kdb diff rocm6.1 rocm6.2                          # the table, worst first, fitted to the terminal
  kdb diff rocm6.1 rocm6.2 --only regressed --top 20
  kdb diff rocm6.1 rocm6.2 --fail-on new-spills     # exit 1 when a kernel spills more
  kdb diff rocm6.1 rocm6.2 -f markdown > comment.md # a pull-request comment (<= 65,536 characters)
  kdb diff rocm6.1 rocm6.2 --kernel 'matmul*'       # deep view of the matching kernels
  kdb diff rocm6.1 /tmp/triton_cache                # a snapshot against a cache directory
  kdb diff t36 t37 --why -j 4                       # the stage of each change: triton, llvm, ptxas or both
"""

REPORT_EPILOG = """\b
Examples:
  kdb report rocm6.1 rocm6.2 --output upgrade.html   # plots, ranked table and drill-down of a diff
  kdb report rocm6.2 --output rocm6.2.html           # one snapshot: occupancy, registers, spills
"""

INGEST_EPILOG = """\b
Examples:
  kdb ingest ~/.triton/cache --tag rocm6.2 --label rocm=6.2
  kdb ingest /tmp/cache --tag nightly --replace -q
"""

TAGS_EPILOG = """\b
Examples:
  kdb tags
  kdb tags --format json | jq '.[].tag'
"""

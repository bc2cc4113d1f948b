"""Autotuned scaled add (x * alpha + y) for the *.autotune.json cache files (Triton 3.4+).

The corpus build drives Triton's own Autotuner with a placeholder benchmark (no GPU):
see corpus/README.md. The configs are defined here; the decorator is applied by the
build script so this module imports in every release.
"""

import triton
import triton.language as tl

AUTOTUNE_CONFIGS = [
    # (BLOCK, num_warps)
    (256, 2),
    (1024, 4),
    (4096, 8),
]


@triton.jit
def autotuned_axpy_kernel(x_ptr, y_ptr, out_ptr, n_elements, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + y, mask=mask)

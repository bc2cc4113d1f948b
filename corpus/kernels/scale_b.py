"""scale_kernel, variant B: same name and signature as scale_a.py, different body
(out = x * factor + 1, clamped to be non-negative)."""

import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, factor, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.maximum(x * factor + 1.0, 0.0)
    tl.store(out_ptr + offs, y, mask=mask)

"""scale_kernel, variant A: out = x * factor."""

import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, factor, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * factor, mask=mask)

"""Fused elementwise kernel mixing transcendental functions (exp, log, sqrt)."""

import triton
import triton.language as tl


@triton.jit
def fused_elementwise_kernel(x_ptr, y_ptr, out_ptr, n_elements, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    a = tl.exp(x * alpha)
    b = tl.log(tl.abs(y) + 1.0)
    c = tl.sqrt(a * a + b * b)
    out = c / (1.0 + tl.exp(-c))
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)

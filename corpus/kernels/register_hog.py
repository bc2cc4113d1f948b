"""A kernel built to exhaust registers: an fp32 matmul with a huge output tile.

With BLOCK_M = BLOCK_N = 256 the fp32 accumulator alone is 256 registers per thread at
num_warps=4 (wave64), so the compiler must spill to scratch / local memory.
"""

import triton
import triton.language as tl


@triton.jit
def register_hog_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    K,
    stride_am,
    stride_bk,
    stride_cm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * stride_bk + offs_n[None, :])
        d = tl.dot(a, b)
        acc += d
        acc2 += d * d
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc + tl.sqrt(acc2))

"""FlashAttention-style forward pass with online softmax.

One program handles BLOCK_M query rows of one (batch, head); it walks the KV sequence in
BLOCK_N chunks keeping the running max m_i, running sum l_i and the output accumulator acc.
"""
import triton
import triton.language as tl


@triton.jit
def attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len,
                    stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                    stride_oh, stride_om,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = q_ptr + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    for start_n in range(0, seq_len, BLOCK_N):
        cur_n = start_n + offs_n
        k_ptrs = k_ptr + off_h * stride_kh + cur_n[None, :] * stride_kn + offs_d[:, None]
        k = tl.load(k_ptrs, mask=cur_n[None, :] < seq_len, other=0.0)
        qk = tl.dot(q, k)
        qk = tl.where(cur_n[None, :] < seq_len, qk * qk_scale, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v_ptrs = v_ptr + off_h * stride_vh + cur_n[:, None] * stride_vn + offs_d[None, :]
        v = tl.load(v_ptrs, mask=cur_n[:, None] < seq_len, other=0.0)
        acc += tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)

"""Addressing of [tokens, heads, dim] tensors in the kernels: one int64 offset per chunk, int32 inside."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def row_offsets(row0, i_head, NH: tl.constexpr, D: tl.constexpr, o_t, o_d):
    """Offsets of tokens row0 + o_t, head i_head, columns o_d in a [tokens, NH, D] tensor: one int64
    scalar offset for the chunk (token offsets pass 2^31 elements at a million tokens) plus int32
    offsets inside it, instead of 64-bit arithmetic on every element. Shared by tensors of one
    layout (the bf16 parts of one operand)."""
    return (row0 * NH + i_head) * D + (o_t[:, None] * (NH * D) + o_d[None, :])


@triton.jit
def row_offsets_t(row0, i_head, NH: tl.constexpr, D: tl.constexpr, o_t, o_d):
    """row_offsets' tile transposed, [columns o_d, tokens o_t]: where a tile formed transposed is stored
    as the untransposed one."""
    return (row0 * NH + i_head) * D + (o_t[None, :] * (NH * D) + o_d[:, None])


@triton.jit
def row_tile(base, row0, i_head, NH: tl.constexpr, D: tl.constexpr, o_t, o_d):
    """Pointers to tokens row0 + o_t, head i_head, columns o_d of a [tokens, NH, D] tensor (row_offsets)."""
    return base + row_offsets(row0, i_head, NH, D, o_t, o_d)


@triton.jit
def rows_block(base, tok0, i_head, T_seq, t0, NH: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
               BD: tl.constexpr, d0=0):
    """Block pointer to tokens t0 .. t0 + BT - 1 of one sequence (tok0, T_seq tokens), head i_head,
    columns d0 .. d0 + BD - 1, of a [tokens, NH, D] tensor; load with boundary_check=(0, 1)."""
    return tl.make_block_ptr(base + (tok0 * NH + i_head) * D, (T_seq, D), (NH * D, 1), (t0, d0), (BT, BD), (1, 0))


@triton.jit
def row_vec(base, row0, i_head, NH: tl.constexpr, o_t):
    """Pointers to tokens row0 + o_t, head i_head of a [tokens, NH] tensor (as row_tile)."""
    return base + (row0 * NH + i_head) + o_t * NH


@triton.jit
def decay_ptrs(base, row0, o, i_hv, HV: tl.constexpr, n_rows, BY_HEAD: tl.constexpr = False):
    """Pointers to tokens row0 + o (o: an offset or a vector of them), value head i_hv of the cumulative
    log-decays G that the WY pass stores: [tokens, HV] (row_vec's pointers), or BY_HEAD [HV, n_rows]
    (n_rows: the tokens of all sequences), a head's tokens contiguous, so that a chunk's BT values of
    one head are BT x 4 bytes in a row instead of one a cache line (plan_forward's decays_layout)."""
    if BY_HEAD:
        return base + (i_hv.to(tl.int64) * n_rows + row0) + o
    return row_vec(base, row0, i_hv, HV, o)


@triton.jit
def rows_desc(base, tok0, i_head, T_seq, NH: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    """TMA descriptor of one sequence's tokens (tok0, T_seq tokens), head i_head, of a [tokens, NH, D]
    tensor, in [BT, BD] blocks: rows past T_seq and columns past D read as zeros and are not stored.
    The hardware needs 16-byte multiples: D and NH x D elements, and the tensor's start. An empty
    sequence (whose walk loads nothing) gets one row: a tensor map's dimensions must not be zero."""
    return tl.make_tensor_descriptor(base + (tok0 * NH + i_head) * D, shape=[tl.maximum(T_seq, 1), D],
                                     strides=[NH * D, 1], block_shape=[BT, BD])


@triton.jit
def load_rows(src, tok0, i_head, T_seq, t0, NH: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
              BD: tl.constexpr, d0=0, TMA: tl.constexpr = False):
    """Tokens t0 .. t0 + BT - 1, columns d0 .. d0 + BD - 1 of one sequence and head of a [tokens, NH, D]
    tensor, zeros out of bounds: src is that tensor (a block-pointer load) or, with TMA, rows_desc of
    this sequence and head (a TMA load, one instruction and no per-thread addresses)."""
    if TMA:
        b = src.load([t0, d0])
    else:
        b = tl.load(rows_block(src, tok0, i_head, T_seq, t0, NH, D, BT, BD, d0), boundary_check=(0, 1),
                    padding_option="zero")
    return b


@triton.jit
def store_rows(dst, value, tok0, i_head, T_seq, t0, NH: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
               BD: tl.constexpr, d0=0, TMA: tl.constexpr = False):
    """load_rows' inverse: value [BT, BD], cast to dst's dtype, into dst's rows and columns that exist
    (dst as in load_rows)."""
    if TMA:
        dst.store([t0, d0], value.to(dst.dtype))      # a descriptor's dtype is its elements'
    else:
        tl.store(rows_block(dst, tok0, i_head, T_seq, t0, NH, D, BT, BD, d0), value.to(dst.dtype.element_ty),
                 boundary_check=(0, 1))

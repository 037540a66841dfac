"""Split products: fp32-accurate matrix products on bf16 matrix units.

With bf16 inputs every product can run on bf16 matrix units at fp32 accuracy, because the inputs
are exact bf16 operands and each computed fp32 operand is cut into 2 or 3 bf16 parts. Against tf32x3
products of fp32 tiles this halves the matrix-unit time and the registers and shared memory of the
operands, which is what kept the forward kernels spilling.

tf32_parts / dot_tf32x3: Triton's tf32x3 products with the fp32 operands cut here, without the guard
against infinities that Triton adds to every element (the WY pass's inverse: INVERSE="subst", every
fp16 inverse's fallback, and "blocks_parts").
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def bf16_parts(a, NSPLIT: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """fp32 ``a`` as NSPLIT bf16 tiles a_1 + a_2 (+ a_3): a_1 = bf16(a), a_2 = bf16(a - a_1), ..., each
    part carrying the next 8 bits of the mantissa (16 bits for 2 parts, all 24 for 3), returned in
    DOT_DTYPE (bf16; fp32 in Triton's CPU interpreter, the values still rounded to bf16). With
    NSPLIT = 2 the third tile returned is a placeholder."""
    b_1 = a.to(tl.bfloat16)
    b_r = a - b_1.to(tl.float32)
    b_2 = b_r.to(tl.bfloat16)
    b_3 = b_2                                    # unused placeholder (Triton tuples hold no None)
    if NSPLIT == 3:
        b_3 = (b_r - b_2.to(tl.float32)).to(tl.bfloat16)
    return b_1.to(DOT_DTYPE), b_2.to(DOT_DTYPE), b_3.to(DOT_DTYPE)


@triton.jit
def dot_parts(a_1, a_2, a_3, NA: tl.constexpr, b_1, b_2, b_3, NB: tl.constexpr, acc):
    """acc + (a_1 + a_2 + a_3) @ (b_1 + b_2 + b_3) from bf16 parts (bf16_parts), NA and NB of them
    (1: the operand is exact in bf16; or the same N = 2 or 3). One side split: N products. Both: the
    products of parts i, j with i + j <= N + 1 (3 for N = 2, 6 for N = 3); the dropped ones are below
    2^-(8 N) relative. Smallest first, so that the large terms are added last."""
    if NA == 1 and NB == 1:
        acc = tl.dot(a_1, b_1, acc)
    elif NA == 1:
        if NB == 3:
            acc = tl.dot(a_1, b_3, acc)
        acc = tl.dot(a_1, b_2, acc)
        acc = tl.dot(a_1, b_1, acc)
    elif NB == 1:
        if NA == 3:
            acc = tl.dot(a_3, b_1, acc)
        acc = tl.dot(a_2, b_1, acc)
        acc = tl.dot(a_1, b_1, acc)
    else:
        if NA == 3:
            acc = tl.dot(a_1, b_3, acc)
            acc = tl.dot(a_2, b_2, acc)
            acc = tl.dot(a_3, b_1, acc)
        acc = tl.dot(a_1, b_2, acc)
        acc = tl.dot(a_2, b_1, acc)
        acc = tl.dot(a_1, b_1, acc)
    return acc


@triton.jit
def split_dot(a, b, acc, NSPLIT: tl.constexpr, SPLIT_A: tl.constexpr, SPLIT_B: tl.constexpr,
              DOT_DTYPE: tl.constexpr):
    """acc + a @ b on bf16 matrix units at (nearly) fp32 accuracy: the fp32 operands flagged SPLIT_A /
    SPLIT_B are cut into NSPLIT bf16 parts (bf16_parts); an operand not split must hold bf16 values
    (the inputs as stored) in DOT_DTYPE. Products of bf16 values are exact and accumulate in fp32, so
    with one side split the result is exact to 8 * NSPLIT bits of that side (3 parts: as fp32; 2: 16
    bits, where tf32 keeps 11); with both split, see dot_parts. Each bf16 product costs half a tf32
    one on the matrix units, and bf16 operands take half the registers and shared memory of fp32 ones."""
    if SPLIT_A:
        a_1, a_2, a_3 = bf16_parts(a, NSPLIT, DOT_DTYPE)
    else:
        a_1, a_2, a_3 = a, a, a
    if SPLIT_B:
        b_1, b_2, b_3 = bf16_parts(b, NSPLIT, DOT_DTYPE)
    else:
        b_1, b_2, b_3 = b, b, b
    return dot_parts(a_1, a_2, a_3, NSPLIT if SPLIT_A else 1, b_1, b_2, b_3, NSPLIT if SPLIT_B else 1, acc)


@triton.jit
def store_parts(p, p_2, p_3, b, mask, NPARTS: tl.constexpr):
    """Store fp32 ``b`` at p in p's dtype (NPARTS = 0), or as NPARTS bf16 parts (bf16_parts) at p, p_2
    (and p_3): what a split product reads back, with no fp32 tile in registers."""
    if NPARTS == 0:
        tl.store(p, b.to(p.dtype.element_ty), mask=mask)
    else:
        b_1, b_2, b_3 = bf16_parts(b, NPARTS, tl.bfloat16)
        tl.store(p, b_1, mask=mask)
        tl.store(p_2, b_2, mask=mask)
        if NPARTS == 3:
            tl.store(p_3, b_3, mask=mask)


@triton.jit
def load_parts(p_1, p_2, p_3, SPLIT: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """A tile through block pointers (rows and columns out of bounds read zeros): as stored when
    SPLIT = 0 (the other two returned are placeholders); else its SPLIT bf16 parts (store_parts) in
    DOT_DTYPE, which go to the matrix units as they are: no fp32 tile in registers."""
    b_1 = tl.load(p_1, boundary_check=(0, 1), padding_option="zero")
    if SPLIT > 0:
        b_1 = b_1.to(DOT_DTYPE)
        b_2 = tl.load(p_2, boundary_check=(0, 1), padding_option="zero").to(DOT_DTYPE)
        b_3 = b_2
        if SPLIT == 3:
            b_3 = tl.load(p_3, boundary_check=(0, 1), padding_option="zero").to(DOT_DTYPE)
    else:
        b_2, b_3 = b_1, b_1
    return b_1, b_2, b_3


@triton.jit
def cat_cols(a, b):
    """[M, N] tiles side by side: [a | b], [M, 2N]."""
    M: tl.constexpr = a.shape[0]
    N: tl.constexpr = a.shape[1]
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), (M, 2 * N))


@triton.jit
def cat_rows(a, b):
    """[M, N] tiles stacked: [a; b], [2M, N]."""
    M: tl.constexpr = a.shape[0]
    N: tl.constexpr = a.shape[1]
    return tl.reshape(tl.permute(tl.join(a, b), (2, 0, 1)), (2 * M, N))


@triton.jit
def sum_halves(r):
    """r[:, :N] + r[:, N:] of an [M, 2N] tile."""
    M: tl.constexpr = r.shape[0]
    N: tl.constexpr = r.shape[1] // 2
    x, y = tl.split(tl.permute(tl.reshape(r, (M, 2, N)), (0, 2, 1)))
    return x + y


@triton.jit
def dot_cat(a_1, a_2, NA: tl.constexpr, b_1, b_2):
    """(a_1 (+ a_2)) @ (b_1 + b_2) from bf16 parts as ONE matrix product, where dot_parts issues 2
    or 3 that each wait for the matrix units: the parts of b side by side, a @ [b_1 | b_2], its two
    halves summed after; with a in two parts (NA = 2), [a_1 | a_2] @ [[b_1 | b_2]; [b_1 | b_2]], all
    four products of parts (a_2 b_2 too: a little more exact than dot_parts, 4/3 of its work).
    The accumulator is twice as wide, so it pays for narrow b (the state walk at 32 columns: 12 waits
    a chunk became 5, 8% off the walk on an H200, benchmarks/NOTES.md v7); at 64 columns it spills."""
    b_c = cat_cols(b_1, b_2)
    if NA == 1:
        return sum_halves(tl.dot(a_1, b_c))
    else:
        return sum_halves(tl.dot(cat_cols(a_1, a_2), cat_rows(b_c, b_c)))


@triton.jit
def dot_split(a_1, a_2, NA: tl.constexpr, b_1, b_2, acc, FUSED: tl.constexpr):
    """acc (None: 0) + (a_1 (+ a_2)) @ (b_1 + b_2) from 2-part operands (NA parts of a): one matrix
    product (dot_cat) with FUSED, else dot_parts' 2 or 3 accumulated into acc."""
    if FUSED:
        r = dot_cat(a_1, a_2, NA, b_1, b_2)
        if acc is not None:
            r = acc + r
        return r
    else:
        return dot_parts(a_1, a_2, a_2, NA, b_1, b_2, b_2, 2, acc)


@triton.jit
def tf32_parts(a):
    """Finite fp32 ``a`` as big + small: big = a rounded to a tf32 value (to nearest, ties away: half
    an ulp added to the bits, the 13 low mantissa bits cleared), small = a - big, exact in fp32 (the
    matrix units keep its top 11 bits). Infinities and NaN are not parts of anything here."""
    big = ((a.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return big, a - big


@triton.jit
def dot_tf32x3(a, b, acc=None):
    """acc + a @ b from finite fp32 tiles at tf32x3 accuracy: a_2 b_1 + a_1 b_2 + a_1 b_1 on tf32
    matrix units, the parts from tf32_parts. Triton's input_precision="tf32x3" splits the same way
    but also guards every element against infinities (a compare and a select per element of each
    operand: a fifth of the WY kernel's instructions); the inverse's entries are finite."""
    a_1, a_2 = tf32_parts(a)
    b_1, b_2 = tf32_parts(b)
    r = tl.dot(a_2, b_1, acc, input_precision="tf32")
    r = tl.dot(a_1, b_2, r, input_precision="tf32")
    return tl.dot(a_1, b_1, r, input_precision="tf32")


@triton.jit
def f16_pair(a, F16_DOT: tl.constexpr):
    """Finite fp32 ``a`` as two fp16 values big + small (big = fp16(a), small = fp16(a - big): 22 bits
    of a's mantissa where |a| is in fp16's normal range; smaller entries keep fp16's absolute
    resolution), in F16_DOT (fp16; fp32 in Triton's interpreter, the values still rounded)."""
    big = a.to(tl.float16)
    small = (a - big.to(tl.float32)).to(tl.float16)
    return big.to(F16_DOT), small.to(F16_DOT)


@triton.jit
def dot_f16x2(a, b, F16_DOT: tl.constexpr):
    """a @ b from finite fp32 tiles whose entries stay below fp16's largest (65504): a_2 b_1 + a_1 b_2 +
    a_1 b_1 on fp16 matrix units (f16_pair), ~22 bits like tf32x3 at half its matrix instructions
    (fp16 products take 16 of the inner dimension a step, tf32 8)."""
    a_1, a_2 = f16_pair(a, F16_DOT)
    b_1, b_2 = f16_pair(b, F16_DOT)
    r = tl.dot(a_2, b_1)
    r = tl.dot(a_1, b_2, r)
    return tl.dot(a_1, b_1, r)


@triton.jit
def to_f16(x, F16_DOT: tl.constexpr):
    """x rounded to fp16, as the matrix units take it (F16_DOT: fp16; fp32 in Triton's interpreter,
    whose 16-bit products read raw bits: the values are still rounded to fp16)."""
    return x.to(tl.float16).to(F16_DOT)


@triton.jit
def tile_max(x):
    """max |x| over a 2-D tile (a scalar): what decides an fp16 operand's range."""
    return tl.max(tl.max(tl.abs(x), axis=1), axis=0)

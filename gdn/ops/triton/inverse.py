"""The in-chunk triangular inverse of the WY pass in Triton: T = (I + A)^-1 for a strictly
lower-triangular fp32 tile A [BT, BT] (gdn.ops.triton.wy forms A; gdn.ops.wy is the torch algorithm).

Every algorithm here computes the same inverse; they differ in what the matrix units take and how
much of it is exact (benchmarks/NOTES.md v8-v19 and v32, benchmarks/precision_study.py):

    unit_lower_inverse       the dispatcher (INVERSE names one of the forms below) and the 2-D forms
                             ("substitution", "product": tf32x3 products of whole tiles)
    unit_lower_inverse_blocks  the product form with the diagonal blocks as a batch (tf32x3, our own
                             tf32x3 parts, or pairs of fp16 parts)
    inverse_subst            4 x 4 blocks, then 16 x 16 ones, then the whole tile by block forward
                             substitution (merge_subst, substitute): every step on plain fp16
                             products ("f16_subst"), or with PRECISE at tf32x3 from our own parts
                             ("subst", the default of the passes without fp16 products, and every
                             fp16 inverse's fallback); TRANSPOSED: the same on the transposes
    f16_out_of_range         whether an fp16 inverse needs the tf32x3 fallback (a chunk whose |A_ij|
                             exceeds 1 or whose T leaves fp16's range)

The product forms multiply partial products that grow binomially where keys are near parallel
(with beta = 2, as 2^m C(15, m) in a 16 x 16 block): at tf32x3 their sums then cancel to a few %
of T (o 5-26% off the float64 recurrence with beta = 2 and keys within ~20 degrees of each other,
NOTES.md v66), where substitution's partial results are T's own rows and keep ~fp32's bits.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .split_dot import dot_f16x2, dot_tf32x3, tile_max, to_f16


_F16_SAFE = tl.constexpr(16384.0)            # merge_subst's sum |T| at most this (so every entry), else tf32x3


@triton.jit
def _dot3(a, b, OWN_PARTS: tl.constexpr, F16_DOT: tl.constexpr = tl.float16):
    """a @ b at tf32x3: Triton's, or from our own parts (OWN_PARTS: split_dot.dot_tf32x3); OWN_PARTS = 2:
    from pairs of fp16 parts (split_dot.dot_f16x2, in F16_DOT)."""
    if OWN_PARTS == 2:
        return dot_f16x2(a, b, F16_DOT)
    if OWN_PARTS:
        return dot_tf32x3(a, b)
    return tl.dot(a, b, input_precision="tf32x3")


@triton.jit
def diagonal_blocks(b_A, BT: tl.constexpr, BLOCK: tl.constexpr):
    """The BLOCK x BLOCK diagonal blocks of a [BT, BT] tile as a batch [BT / BLOCK, BLOCK, BLOCK]."""
    NB: tl.constexpr = BT // BLOCK
    o_b = tl.arange(0, NB)
    # [NB, BLOCK, NB, BLOCK] -> the entries whose row and column blocks agree.
    b_A4 = tl.reshape(b_A, [NB, BLOCK, NB, BLOCK])
    return tl.sum(tl.where(o_b[:, None, None, None] == o_b[None, None, :, None], b_A4, 0.0), axis=2)


@triton.jit
def unit_lower_inverse_blocks(b_A, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr,
                              OWN_PARTS: tl.constexpr = False, F16_DOT: tl.constexpr = tl.float16,
                              SUBST_F16: tl.constexpr = False):
    """unit_lower_inverse's product algorithm with the block-diagonal factor kept as a batch of NB
    BLOCK x BLOCK matrices [NB, BLOCK, BLOCK] (batched products: 1/NB^2 of the work of masked BT x BT
    tiles, and small register tiles), and the products with it as batched products over row blocks
    (X A_off) or column blocks (R X). Only the two or three BT x BT products of the merge remain.
    SUBST_F16: the merge by block forward substitution on plain fp16 products instead (merge_subst)."""
    NB: tl.constexpr = BT // BLOCK
    o_i = tl.arange(0, BT)
    o_j = tl.arange(0, BLOCK)
    same_block = (o_i[:, None] // BLOCK) == (o_i[None, :] // BLOCK)
    b_Ad = diagonal_blocks(b_A, BT, BLOCK)
    eye_d = tl.where(o_j[:, None] == o_j[None, :], 1.0, 0.0)[None, :, :] + tl.zeros([NB, BLOCK, BLOCK], tl.float32)
    # (I + A_d)^-1 = (I - A_d)(I + A_d^2)(I + A_d^4)(I + A_d^8) (A_d^16 = 0), at tf32x3 as in the 2-D form.
    b_X = eye_d - b_Ad
    b_P = b_Ad
    for _ in tl.static_range(1, 4):              # BLOCK = 16 = 2^4
        b_P = _dot3(b_P, b_P, OWN_PARTS, F16_DOT)
        b_X = _dot3(b_X, eye_d + b_P, OWN_PARTS, F16_DOT)
    if NB == 1:
        return tl.reshape(b_X, [BT, BT])
    eye = tl.where(o_i[:, None] == o_i[None, :], 1.0, 0.0)
    # N = X A_off, row block by row block.
    b_Aoff = tl.reshape(tl.where(same_block, 0.0, b_A), [NB, BLOCK, BT])
    if SUBST_F16:
        return merge_subst(b_X, b_Aoff, BT, BLOCK, F16_DOT)
    b_N = tl.reshape(_dot3(b_X, b_Aoff, OWN_PARTS, F16_DOT), [BT, BT])
    b_R = eye - b_N
    b_P2 = b_N
    for _ in tl.static_range(1, LOG_BLOCKS):
        b_P2 = _dot3(b_P2, b_P2, OWN_PARTS, F16_DOT)
        b_R = _dot3(b_R, eye + b_P2, OWN_PARTS, F16_DOT)
    # T = R X: column block c of T is (column block c of R) X_c.
    b_R3 = tl.permute(tl.reshape(b_R, [BT, NB, BLOCK]), (1, 0, 2))
    b_T3 = _dot3(b_R3, b_X, OWN_PARTS, F16_DOT)
    return tl.reshape(tl.permute(b_T3, (1, 0, 2)), [BT, BT])


@triton.jit
def _operand(x, F16_DOT: tl.constexpr, PRECISE: tl.constexpr):
    """x as the substitution's products take it: rounded to fp16 (to_f16), or with PRECISE as it is
    (fp32, split into tf32 parts by the product)."""
    if PRECISE:
        y = x
    else:                           # (one return: the compiler types both branches' returns alike)
        y = to_f16(x, F16_DOT)
    return y


@triton.jit
def _dot(a, b, acc, F16_DOT: tl.constexpr, PRECISE: tl.constexpr):
    """acc + a @ b (acc None: a @ b): one plain fp16 product with an fp32 sum, or with PRECISE three at
    tf32 from our own parts (split_dot.dot_tf32x3)."""
    if PRECISE:
        r = dot_tf32x3(a, b, acc)
    else:
        r = tl.dot(to_f16(a, F16_DOT), to_f16(b, F16_DOT), acc)
    return r


@triton.jit
def substitute(b_X, b_N, STEPS: tl.constexpr, F16_DOT: tl.constexpr, TRANSPOSED: tl.constexpr = False,
               PRECISE: tl.constexpr = False):
    """Block forward substitution: from T = X, STEPS times T <- X - N T (b_N already as _operand
    takes it; X and T fp32, [BT, BT] or batched [NB, BLOCK, BLOCK]). Each step makes one more block
    row final, so STEPS = blocks - 1 gives (I + A)^-1 from X, the inverses of A's diagonal blocks,
    and N = X A_off. Each step is one product accumulated onto X (-N in fp16 is exact): no separate
    subtraction of the [BT, BT] tile. TRANSPOSED: the same steps on the transposes, given X^T and
    N^T: T^T <- X^T - T^T N^T, the running tile the left operand, whose fp16 copy the matrix units
    take from the registers it was formed in (as the right one it goes through shared memory)."""
    b_T = b_X
    b_negN = -b_N
    for _ in tl.static_range(STEPS):
        if TRANSPOSED:
            b_T = _dot(b_T, b_negN, b_X, F16_DOT, PRECISE)
        else:
            b_T = _dot(b_negN, b_T, b_X, F16_DOT, PRECISE)
    return b_T


@triton.jit
def merge_subst(b_X, b_Aoff, BT: tl.constexpr, BLOCK: tl.constexpr, F16_DOT: tl.constexpr,
                TRANSPOSED: tl.constexpr = False, PRECISE: tl.constexpr = False):
    """(I + A)^-1 [BT, BT] from the inverses of its diagonal blocks X [NB, BLOCK, BLOCK] and A's
    off-diagonal blocks b_Aoff [NB, BLOCK, BT] (row blocks), by block forward substitution:
    (I + A) T = I gives T = X - N T with N = X A_off strictly block-lower, so from T = X each step
    T <- X - N T makes one more block row final (NB - 1 steps). Every product is one fp16 product
    with an fp32 sum (PRECISE: tf32x3), of N and T's own rows: nothing like the product form's
    partial products, which grow binomially where keys are near parallel and need 22 bits. 11 bits
    keep T within 1.5x of its own fp16 rounding on random keys, ~10x on near-parallel ones
    (benchmarks/NOTES.md v18, precision_study.py; the fp16 walk's o and S move by at most a few %
    there). TRANSPOSED: T^T from the blocks' X^T and A^T's off-diagonal blocks as a [BT, BT] tile:
    N^T = A_off^T X^T, column block c of it (column block c of A_off^T) X_c^T, then substitute's
    transposed steps."""
    NB: tl.constexpr = BT // BLOCK
    o_b = tl.arange(0, NB)
    if TRANSPOSED:
        b_Ac = tl.permute(tl.reshape(b_Aoff, [BT, NB, BLOCK]), (1, 0, 2))          # [NB, BT, BLOCK]
        b_N = _dot(b_Ac, b_X, None, F16_DOT, PRECISE)
        b_N = tl.reshape(tl.permute(b_N, (1, 0, 2)), [BT, BT])
    else:
        b_N = tl.reshape(_dot(b_X, b_Aoff, None, F16_DOT, PRECISE), [BT, BT])
    # X as a BT x BT block-diagonal tile: block b of row block b, zeros elsewhere.
    b_Xf = tl.reshape(tl.where(o_b[:, None, None, None] == o_b[None, None, :, None], b_X[:, :, None, :], 0.0),
                      [BT, BT])
    return substitute(b_Xf, _operand(b_N, F16_DOT, PRECISE), NB - 1, F16_DOT, TRANSPOSED, PRECISE)


@triton.jit
def inverse_subst(b_A, BT: tl.constexpr, F16_DOT: tl.constexpr, TRANSPOSED: tl.constexpr = False,
                  PRECISE: tl.constexpr = False):
    """(I + A)^-1 [BT, BT] (BT = 16, 32 or 64) on plain fp16 products only, no pairs (PRECISE: at
    tf32x3 from our own parts): the inverses X4 of the 4 x 4 diagonal blocks as (I - A4)(I + A4^2)
    (A4^4 = 0; its partial products at most twice the entries), then the 16 x 16 diagonal blocks by
    block forward substitution from X4 (T <- X4 - N T, N = X4 A_off, three steps, batched over the
    blocks), then the whole tile from those (merge_subst). precision_study.py's replay: on fp16, T
    within ~1.2x of merge_subst's error after pairs (NOTES.md v18).
    TRANSPOSED: T^T from A^T (strictly upper), every step transposed (X4^T = (I + (A4^T)^2)(I - A4^T),
    N^T = A_off^T X^T, substitute's transposed steps): the same products' sums, with each running
    tile the left operand of the next product (INVERSE="f16_subst_t")."""
    NB: tl.constexpr = BT // 16
    o_j = tl.arange(0, 16)
    same4 = ((o_j[:, None] // 4) == (o_j[None, :] // 4))[None, :, :]
    eye = tl.where(o_j[:, None] == o_j[None, :], 1.0, 0.0)[None, :, :] + tl.zeros([NB, 16, 16], tl.float32)
    b_Ad = diagonal_blocks(b_A, BT, 16)
    b_A4 = tl.where(same4, b_Ad, 0.0)
    b_P = _dot(b_A4, b_A4, None, F16_DOT, PRECISE)
    b_off4 = _operand(tl.where(same4, 0.0, b_Ad), F16_DOT, PRECISE)
    if TRANSPOSED:
        # (Each factor rounded as it is formed, in the order the fp16 kernels were measured in.)
        b_X4 = _dot(_operand(eye + b_P, F16_DOT, PRECISE), eye - b_A4, None, F16_DOT, PRECISE)
        b_N16 = _operand(_dot(b_off4, b_X4, None, F16_DOT, PRECISE), F16_DOT, PRECISE)
    else:
        b_X4 = _dot(_operand(eye - b_A4, F16_DOT, PRECISE), eye + b_P, None, F16_DOT, PRECISE)
        b_N16 = _operand(_dot(b_X4, b_off4, None, F16_DOT, PRECISE), F16_DOT, PRECISE)
    b_X = substitute(b_X4, b_N16, 3, F16_DOT, TRANSPOSED, PRECISE)          # four 4 x 4 blocks a 16 x 16 one
    if NB == 1:
        return tl.reshape(b_X, [BT, BT])
    o_i = tl.arange(0, BT)
    b_off = tl.where((o_i[:, None] // 16) == (o_i[None, :] // 16), 0.0, b_A)
    if TRANSPOSED:
        return merge_subst(b_X, b_off, BT, 16, F16_DOT, True, PRECISE)
    return merge_subst(b_X, tl.reshape(b_off, [NB, 16, BT]), BT, 16, F16_DOT, False, PRECISE)


@triton.jit
def inverse_tf32x3(b_A, BT: tl.constexpr, F16_DOT: tl.constexpr):
    """(I + A)^-1 [BT, BT] by inverse_subst's substitution at tf32x3 from our own parts (~fp32's bits
    wherever T itself is well scaled): INVERSE="subst", and the fallback of every fp16 form."""
    return inverse_subst(b_A, BT, F16_DOT, False, True)


@triton.jit
def inverse_f16_checked(b_A, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr,
                        INVERSE: tl.constexpr, F16_DOT: tl.constexpr):
    """unit_lower_inverse's "blocks_f16_subst" or "f16_subst" without their tf32x3 fallback: T on fp16
    products and whether the chunk needs the fallback. Their operands (N, T's rows) are not bounded
    by the |A_ij| <= 1 test: a chunk whose T leaves fp16's range needs it too (T_f16_unsafe: a sum,
    since the GPU's max.f32 drops NaN). Where the fallback is needed, T is not the inverse
    (unit_lower_inverse forms it then)."""
    b_T = b_A
    wide = tile_max(b_A) > 1.0
    if not wide:
        if INVERSE == "f16_subst":
            b_T = inverse_subst(b_A, BT, F16_DOT)
        else:
            b_T = unit_lower_inverse_blocks(b_A, BT, BLOCK, LOG_BLOCKS, 2, F16_DOT, True)
        wide = T_f16_unsafe(b_T)
    return b_T, wide


@triton.jit
def unit_lower_inverse(b_A, BT: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCKS: tl.constexpr,
                       INVERSE: tl.constexpr, F16_DOT: tl.constexpr = tl.float16):
    """(I + A)^-1 for a strictly lower-triangular fp32 tile A [BT, BT]; LOG_BLOCKS = log2(BT / BLOCK).

    1. The BLOCK x BLOCK diagonal blocks, all at once: INVERSE="substitution" by forward substitution
       over their BLOCK rows (row r of every block in one step: elementwise work and reductions);
       INVERSE="product" as (I - A_d)(I + A_d^2)(I + A_d^4)(I + A_d^8) (A_d^BLOCK = 0; matrix units
       only, at tf32x3 because the partial products can exceed the inverse's entries).
    2. With X = (I + A_diag)^-1 and N = X A_off (strictly block-lower, so N^(BT/BLOCK) = 0):
       (I + A)^-1 = (I + N)^-1 X = (I - N)(I + N^2)(I + N^4)... X: a few BT^3 products.
    INVERSE="blocks": "product" with X as a batch of BLOCK x BLOCK blocks (unit_lower_inverse_blocks).
    INVERSE="blocks_parts": the same with each tf32x3 product from our own parts (split_dot.dot_tf32x3:
    no guards against infinities, which these finite tiles do not need). INVERSE="blocks_f16": from
    pairs of fp16 parts (split_dot.dot_f16x2) where the chunk's |A_ij| <= 1 (l2-normalised keys,
    |beta| <= 1, g <= 0): the partial products then stay below C(15, 7) = 6435, inside fp16's range;
    any other chunk takes "subst" (a branch per chunk on max |A_ij|).
    INVERSE="blocks_f16_subst": "blocks_f16" with step 2 by block forward substitution on plain fp16
    products (merge_subst; a chunk whose T leaves fp16's range takes "subst" as well).
    INVERSE="f16_subst": the same with step 1 on plain fp16 products too (inverse_subst; BLOCK = 16).
    INVERSE="f16_subst_t": "f16_subst" on the transposes (inverse_subst's TRANSPOSED).
    INVERSE="subst": inverse_subst at tf32x3 (inverse_tf32x3), every fp16 form's fallback. The product
    forms ("product", "blocks", "blocks_parts", "blocks_f16") lose T where keys are near parallel and
    beta exceeds 1 (the module docstring); they stay as named knobs for comparison.
    """
    if INVERSE == "blocks_f16":
        # Pairs of fp16 parts where every |A_ij| <= 1 (the partial products then stay <= 6435), else
        # tf32x3: a chunk whose beta exceeds 1 or whose gates grow (g > 0) takes the wide range.
        if tile_max(b_A) <= 1.0:
            b_T = unit_lower_inverse_blocks(b_A, BT, BLOCK, LOG_BLOCKS, 2, F16_DOT)
        else:
            b_T = inverse_tf32x3(b_A, BT, F16_DOT)
        return b_T
    if INVERSE == "f16_subst_t":
        # (wy_split_factors forms A^T in place; here from A, for the inverse's own tests.)
        b_At = tl.trans(b_A)
        b_Tt = inverse_subst(b_At, BT, F16_DOT, True)
        if f16_out_of_range(b_At, b_Tt):
            b_T = inverse_tf32x3(b_A, BT, F16_DOT)
        else:
            b_T = tl.trans(b_Tt)
        return b_T
    if INVERSE == "blocks_f16_subst" or INVERSE == "f16_subst":
        # As blocks_f16, with the merge on plain fp16 products (merge_subst; f16_subst: every step,
        # inverse_subst); a chunk whose T leaves fp16's range is formed again at tf32x3.
        b_T, wide = inverse_f16_checked(b_A, BT, BLOCK, LOG_BLOCKS, INVERSE, F16_DOT)
        if wide:
            b_T = inverse_tf32x3(b_A, BT, F16_DOT)
        return b_T
    if INVERSE == "subst":
        return inverse_tf32x3(b_A, BT, F16_DOT)
    if INVERSE == "blocks" or INVERSE == "blocks_parts":
        return unit_lower_inverse_blocks(b_A, BT, BLOCK, LOG_BLOCKS, INVERSE == "blocks_parts")
    o_i = tl.arange(0, BT)
    same_block = (o_i[:, None] // BLOCK) == (o_i[None, :] // BLOCK)
    eye = tl.where(o_i[:, None] == o_i[None, :], 1.0, 0.0)
    b_Ad = tl.where(same_block, b_A, 0.0)
    if INVERSE == "product":
        b_X = eye - b_Ad
        b_P = b_Ad
        for _ in tl.static_range(1, 4):          # BLOCK = 16 = 2^4
            b_P = tl.dot(b_P, b_P, input_precision="tf32x3")
            b_X = tl.dot(b_X, eye + b_P, input_precision="tf32x3")
    else:
        b_X = eye
        for r in tl.static_range(1, BLOCK):
            sel = (o_i % BLOCK) == r
            # Row r of every diagonal block, each in its own block's columns.
            b_a = tl.sum(tl.where(sel[:, None], b_Ad, 0.0), axis=0)
            # Its product with the rows already solved (block-local because X is block-diagonal).
            b_t = tl.sum(b_a[:, None] * b_X, axis=0)
            b_X = tl.where(sel[:, None] & same_block, eye - b_t[None, :], b_X)
    if BT > BLOCK:
        b_N = tl.dot(b_X, tl.where(same_block, 0.0, b_A), input_precision="tf32x3")
        b_R = eye - b_N
        b_P = b_N
        for _ in tl.static_range(1, LOG_BLOCKS):
            b_P = tl.dot(b_P, b_P, input_precision="tf32x3")
            b_R = tl.dot(b_R, eye + b_P, input_precision="tf32x3")
        b_X = tl.dot(b_R, b_X, input_precision="tf32x3")
    return b_X


@triton.jit
def f16_out_of_range(b_A, b_T):
    """Whether inverse_subst's T of A [BT, BT] needs the tf32x3 fallback (int32 1 or 0): inverse_f16_checked's
    two tests (an entry |A_ij| > 1, or T_f16_unsafe), made after the inverse, so that no branch comes
    before it."""
    return ((tile_max(b_A) > 1.0) | T_f16_unsafe(b_T)).to(tl.int32)


@triton.jit
def T_f16_unsafe(b_T):
    """Whether an fp16 inverse T [BT, BT] left fp16's range on the way: sum |T| past _F16_SAFE,
    infinite or NaN (an overflow anywhere leaves an infinity or a NaN in T, which the sum keeps; a
    finite sum below the bound bounds every entry)."""
    return ~(tl.sum(tl.sum(tl.abs(b_T), axis=1), axis=0) <= _F16_SAFE)

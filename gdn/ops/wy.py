"""The chunk math in one place: WY factors of a chunk and the affine map they define.

Split a sequence into chunks of C tokens. Inside a chunk, with G_t = g_1 + ... + g_t (within the
chunk) and the chunk-start state S0, every token's write u_t = beta_t (v_t - S_{t-1}^T k_t e^{g_t})
solves one unit-lower-triangular system (seed 002, the WY / UT transform):

    (I + A) U = beta * V  -  diag(beta e^G) K S0,      A_ij = beta_i e^{G_i - G_j} k_i . k_j   (j < i)

so U = u - w S0 with u = (I + A)^-1 (beta * V) and w = (I + A)^-1 (beta e^G * K), both independent of
S0. Everything else is matrix products:

    O      = e^G . (scale * q S0)  +  scale * ((Q K^T) . D) U,     D_ij = e^{G_i - G_j}  (j <= i)
    S_end  = e^{G_C} S0 + (K e^{G_C - G})^T U

i.e. the chunk is the affine map S0 -> A_c S0 + B_c with

    A_c = gamma I - k_dec^T w      (gamma = e^{G_C}: one K x C by C x K product, never C dense K x K)
    B_c = k_dec^T u                (k_dec = K e^{G_C - G})

The chunk algorithm walks S through the chunks; the scan algorithm composes the (A_c, B_c) maps.
Decays are only ever formed as e^{(non-positive difference)}: nothing overflows for any g <= 0. The
cumulative sums G are float64 (chunk_log_decays): a difference G_i - G_j of float32 sums rounds at
the ulp of |G|, so one strongly forgetting token (g = -1000) early in a chunk would cost the later
tokens' decays 4e-5 of their value, where the recurrence loses nothing; and g = -inf (a reset) is
taken as -1e4, whose e^g is 0 in float64 as e^-inf is, instead of making -inf - -inf = NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .common import l2norm_factors, l2norm_factors_from_squares, scratch


@dataclass
class ChunkFactors:
    """Per-chunk factors, chunk-major: N chunks of C tokens, value heads split as H groups of G
    (value head h reads q/k head h // G).

    q:       ``[N, B, H, 1, C, K]`` scale * q, shared by the group (the decay e^G is applied to the
             outputs q S instead: one pass over C x V rows that are being written anyway)
    gate:    ``[N, B, H, G, C]`` e^G, the decay of every token from its chunk's start
    attn:    ``[N, B, H, G, C, C]`` scale * (q k^T) . D, lower triangle with the diagonal
    w:       ``[N, B, H, G, C, K]`` (I + A)^-1 (beta e^G k)
    u:       ``[N, B, H, G, C, V]`` (I + A)^-1 (beta v)
    k_dec:   ``[N, B, H, G, C, K]`` e^{G_C - G} k, the keys as seen from the chunk's end
    gamma:   ``[N, B, H, G]`` e^{G_C}, the decay of the whole chunk
    States are ``[B, H, G, K, V]`` for one chunk, ``[N, B, H, G, K, V]`` for all. The methods write
    into ``out`` when given (no autograd then), else return fresh tensors.
    """

    q: torch.Tensor
    gate: torch.Tensor
    attn: torch.Tensor
    w: torch.Tensor
    u: torch.Tensor
    k_dec: torch.Tensor
    gamma: torch.Tensor
    T: int

    @property
    def num_chunks(self) -> int:
        return self.u.shape[0]

    def writes(self, S0: torch.Tensor, n=slice(None), out=None) -> torch.Tensor:
        """U = u - w S0: what the tokens of chunk(s) ``n`` really write, from start state(s) ``S0``."""
        u = self.u[n]
        U = torch.baddbmm(u.flatten(0, -3), self.w[n].flatten(0, -3), S0.flatten(0, -3), alpha=-1,
                          out=_flat(out))
        return U.view(u.shape)

    def q_heads(self, n=slice(None)) -> torch.Tensor:
        """scale * q of chunk(s) ``n`` for every value head ``[..., B, H, G, C, K]`` (an expanded view:
        flattening it copies when a group has more than one value head)."""
        q = self.q[n]
        return q.expand(*q.shape[:-3], self.gate.shape[-2], *q.shape[-2:])

    def start_outputs(self, S0: torch.Tensor, n=slice(None), out=None) -> torch.Tensor:
        """q S0 ``[..., C, V]``: the part of chunk(s) ``n``'s outputs that comes from the start state(s),
        before the decay e^G (which :meth:`finish_outputs` applies)."""
        q = self.q_heads(n)
        O = torch.bmm(q.flatten(0, -3), S0.flatten(0, -3), out=_flat(out))
        return O.view(*q.shape[:-1], S0.shape[-1])

    def end_state(self, S0: torch.Tensor, U: torch.Tensor, n: int, out=None) -> torch.Tensor:
        """S_end = gamma S0 + k_dec^T U for chunk ``n``; ``out`` may be ``S0`` itself (updated in place)."""
        KV = S0.shape[-2] * S0.shape[-1]
        # One scalar a state, broadcast over a flat row (a trailing [1, 1] broadcast takes torch's slow
        # elementwise path on CPUs).
        S = torch.mul(S0.reshape(-1, KV), self.gamma[n].reshape(-1, 1),
                      out=None if out is None else out.view(-1, KV)).view(-1, *S0.shape[-2:])
        k_dec_t = self.k_dec[n].flatten(0, -3).transpose(-1, -2)
        S = S.baddbmm_(k_dec_t, U.flatten(0, -3)) if out is not None else S.baddbmm(k_dec_t, U.flatten(0, -3))
        return S.view(S0.shape)

    def finish_outputs(self, O_start: torch.Tensor, U: torch.Tensor, n=slice(None), out=None) -> torch.Tensor:
        """The outputs O = e^G O_start + attn U of chunk(s) ``n`` (O_start = q S_start and U
        ``[N, B, H, G, C, V]``) in the public layout ``[B, T, HV, V]``, padding dropped. With ``out``
        (those chunks' rows of the result, ``[B, <= N C, HV, V]``) the sum is formed in O_start itself
        and copied into ``out``."""
        attn = self.attn[n].flatten(0, -3)
        gate = self.gate[n][..., None]
        if out is None:
            O = (O_start * gate).flatten(0, -3).baddbmm(attn, U.flatten(0, -3)).view(O_start.shape)
            N, B, H, G, C, V = O.shape
            return O.permute(1, 0, 4, 2, 3, 5).reshape(B, N * C, H * G, V)[:, : self.T]
        O_start.mul_(gate).flatten(0, -3).baddbmm_(attn, U.flatten(0, -3))
        return _from_chunks(O_start, out)

    def outputs(self, starts: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
        """O = e^G q S_start + attn U for every chunk at once, in the public layout ``[B, T, HV, V]``."""
        return self.finish_outputs(self.start_outputs(starts), U)

    def affine_maps(self, out_A=None, out_B=None):
        """(A_c ``[N, B, H, G, K, K]``, B_c ``[N, B, H, G, K, V]``) with S_end = A_c S0 + B_c."""
        k_dec_t = self.k_dec.transpose(-1, -2)
        A = torch.matmul(k_dec_t, self.w, out=out_A).neg_()
        A.diagonal(dim1=-2, dim2=-1).add_(self.gamma[..., None])      # gamma I - k_dec^T w
        return A, torch.matmul(k_dec_t, self.u, out=out_B)


def _flat(out):
    """``out`` ``[..., m, n]`` as a batch of matrices ``[b, m, n]`` (None stays None)."""
    return None if out is None else out.flatten(0, -3)


def _from_chunks(O: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Copy chunk-major ``O`` ``[N, B, H, G, C, V]`` into ``out`` ``[B, T', HV, V]`` (T' <= N C: the
    last chunk may be cut short by padding), one pass, no chunk-major reshape copy."""
    N, B, H, G, C, V = O.shape
    full = min(N, out.shape[1] // C)
    src = O.permute(1, 0, 4, 2, 3, 5)                                  # [B, N, C, H, G, V]
    if full:
        out[:, : full * C].unflatten(1, (full, C)).unflatten(3, (H, G)).copy_(src[:, :full])
    rest = out.shape[1] - full * C
    if rest:
        out[:, full * C:].unflatten(2, (H, G)).copy_(src[:, full, :rest])
    return out


def _to_chunks(x: torch.Tensor, N: int, C: int, G: int, row_scale=None, out=None) -> torch.Tensor:
    """``[B, N*C, H*G, D]`` -> contiguous chunk-major ``[N, B, H, G, C, D]`` (into ``out`` when
    given, which may repeat a G = 1 result over a larger group dim), rows optionally multiplied by
    ``row_scale`` ``[B, N*C, H*G]`` in the same pass."""
    B, _, HG, D = x.shape
    src = x.view(B, N, C, HG // G, G, D).permute(1, 0, 3, 4, 2, 5)
    scale = None if row_scale is None else _chunk_rows(row_scale, N, C, G)
    if out is None:
        return (src if scale is None else src * scale).contiguous()
    if scale is None:
        return out.copy_(src)                                           # broadcasts over out's group dim
    return torch.mul(src.expand(out.shape), scale.expand(*out.shape[:-1], 1), out=out)


# Any g below this is a reset: e^g is 0 in float64 (from -746 on) and float32, so the floor changes
# no decay, and keeps -inf out of the differences of cumulative sums.
G_FLOOR = -1e4


def chunk_log_decays(g: torch.Tensor, N: int, C: int, H: int, G: int) -> torch.Tensor:
    """Cumulative log decays from each chunk's start, ``[N, B, H, G, C]`` from g ``[B, N*C, H*G]``, in
    float64 (float32 on devices without it, e.g. MPS): the decays are exps of their differences,
    which then keep float32's accuracy however large |G| grows. g is floored at ``G_FLOOR``."""
    B = g.shape[0]
    wide = torch.float32 if g.device.type == "mps" else torch.float64
    return g.view(B, N, C, H, G).permute(1, 0, 3, 4, 2).to(wide).clamp_min(G_FLOOR).cumsum(-1)


def _chunk_rows(x: torch.Tensor, N: int, C: int, G: int) -> torch.Tensor:
    """Per-token scalars ``[B, N*C, H*G]`` as a view ``[N, B, H, G, C, 1]``."""
    B, _, HG = x.shape
    return x.view(B, N, C, HG // G, G, 1).permute(1, 0, 3, 4, 2, 5)


def chunk_factors(q, k, v, g, beta, scale: float, chunk_size: int, use_qk_l2norm: bool = False,
                  ws=None) -> ChunkFactors:
    """WY factors of every chunk. q, k ``[B, T, H, K]``; v ``[B, T, HV, V]``; g, beta ``[B, T, HV]``,
    all in the compute dtype; ``use_qk_l2norm`` normalises q and k on their way into chunk layout.
    With a :class:`gdn.ops.common.Workspace` ``ws`` every factor lands in its reused buffers (no
    autograd); the factors are then valid until the next call that uses ``ws``.

    The sequence is padded to a multiple of ``chunk_size`` with g = beta = 0 and zero q/k/v: a padded
    token's map is the identity, so it changes neither the state nor any real output. Per-token
    scalings ride along the passes that exist anyway (the copies into chunk layout, the C x C decay
    matrices): on a CPU every extra pass over a T x K tensor costs about as much as a matrix product.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    C = chunk_size
    pad = (-T) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, 0, 0, pad)), F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // C
    buf = scratch(ws, q)
    # In place where a product is not needed any more (workspace only: autograd keeps its inputs),
    # and where a per-(q/k)-head product needs no per-value-head copy (groups of one value head).
    reuse = ws is not None
    shared = reuse and G == 1
    # One pass each into chunk-major layout; the l2 normalisation and the output scale ride along on
    # q, the normalisation on k, beta on v (u = (I + A)^-1 (beta v)).
    r_q = l2norm_factors(q) * scale if use_qk_l2norm else q.new_full(q.shape[:-1], scale)
    r_k = l2norm_factors(k) if use_qk_l2norm else None
    q = _to_chunks(q, N, C, 1, r_q, out=buf("q", N, B, H, 1, C, K))         # scale * q   [N, B, H, 1, C, K]
    k = _to_chunks(k, N, C, 1, r_k, out=buf("k", N, B, H, 1, C, K))         # [N, B, H, 1, C, K]
    v = _to_chunks(v, N, C, G, beta, out=buf("v", N, B, H, G, C, V))        # beta * v    [N, B, H, G, C, V]
    Gc = chunk_log_decays(g, N, C, H, G)                                    # [N, B, H, G, C] log-decay from chunk start
    beta = beta.view(B, N, C, H, G).permute(1, 0, 3, 4, 2)                  # [N, B, H, G, C]
    gate = Gc.exp().to(q.dtype)                                             # e^G
    D = _decay_matrix(Gc, q.dtype, out=buf("D", N, B, H, G, C, C))    # e^{G_i - G_j}, j <= i

    kt = k.transpose(-1, -2)
    kk = torch.matmul(k, kt, out=buf("kk", N, B, H, 1, C, C))               # shared by the group
    # A_ij = beta_i D_ij k_i . k_j (j < i; its diagonal and upper triangle are never read).
    A = torch.mul(kk, D, out=kk if shared else buf("A", N, B, H, G, C, C)).mul_(beta[..., None])
    T_inv = unit_lower_inverse(A, out=buf("T_inv", N, B, H, G, C, C), buf=buf)
    u = torch.matmul(T_inv, v, out=buf("u", N, B, H, G, C, V))               # (I + A)^-1 beta V
    # w = (I + A)^-1 diag(beta e^G) K: the scaling on T^-1's C columns, not on K's K columns.
    T_w = torch.mul(T_inv, (beta * gate)[..., None, :], out=T_inv if reuse else None)
    w = torch.matmul(T_w, k.expand(N, B, H, G, C, K), out=buf("w", N, B, H, G, C, K))
    qk = torch.matmul(q, kt, out=buf("qk", N, B, H, 1, C, C))
    attn = torch.mul(qk, D, out=qk if shared else buf("attn", N, B, H, G, C, C)).tril_()   # scale (q k^T) . D, causal
    k_dec = torch.mul(k, (Gc[..., -1:] - Gc).exp_().to(q.dtype)[..., None], out=buf("k_dec", N, B, H, G, C, K))
    return ChunkFactors(q=q, gate=gate, attn=attn, w=w, u=u, k_dec=k_dec, gamma=gate[..., -1], T=T)


@dataclass
class WalkFactors:
    """The factors :func:`gdn.ops.chunk.chunk_forward` walks a block with (no autograd): only what does
    not depend on the state, the rest is formed chunk by chunk while the chunk is in cache.

    Per chunk, from the start state S (``b`` = B * HV value heads; k, q normalised as asked):

        [k S; q S] = kq S                       one product for both (k and q rows stacked)
        Z = beta v - beta e^G . (k S)           the system's right-hand side (seed 002)
        U = T_inv Z                             the writes
        S_end = gamma S + k^T (e^{G_C - G} . U)
        O = e^G . (q S) + attn U

    kq:        ``[N, b, 2C, K]`` rows [k; scale * q], q l2-normalised when asked, k as given (its
               normalisation r_k is folded into beta_gate, to_end, T_inv and attn)
    beta_v:    ``[N, b, C, V]`` beta * v; the walk overwrites chunk n's with its Z
    T_inv:     ``[N, b, C, C]`` (I + A)^-1
    attn:      ``[N, b, C, C]`` scale * (q k^T) . D, lower triangle with the diagonal, zero above
    beta_gate: ``[N, b, C, 1]`` beta e^G r_k;  to_end: ``[N, b, C, 1]`` e^{G_C - G} r_k;  gate: ``[N, b, C, 1]`` e^G
    gamma:     ``[N, b, 1]`` e^{G_C}
    """

    kq: torch.Tensor
    beta_v: torch.Tensor
    T_inv: torch.Tensor
    attn: torch.Tensor
    beta_gate: torch.Tensor
    to_end: torch.Tensor
    gate: torch.Tensor
    gamma: torch.Tensor


def walk_factors(q, k, v, g, beta, scale: float, chunk_size: int, use_qk_l2norm: bool, ws) -> WalkFactors:
    """:class:`WalkFactors` of one block (inputs as :func:`chunk_factors`, ``T`` a multiple of
    ``chunk_size``), every factor in a buffer of the workspace ``ws``.

    On a 2-core CPU a pass over a block-sized C x K tensor that has fallen out of cache costs about as
    much as a C x C x K product, so this makes three of them (q and k into one stacked buffer, beta v)
    and leaves the rest of the per-token scalings to the walk, which applies them to cache-hot chunk
    results.
    """
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    C = chunk_size
    N = T // C
    b = B * HV
    buf = scratch(ws, q)
    r_q = l2norm_factors(q) * scale if use_qk_l2norm else q.new_full(q.shape[:-1], scale)
    # k goes in as it is: its l2 norms come with k k^T (its diagonal), and the normalisation rides
    # along the scalings that exist anyway (no pass of its own over k).
    kq = buf("kq", N, B, H, G, 2 * C, K)                                     # q/k broadcast over the group
    _to_chunks(k, N, C, 1, out=kq[..., :C, :])
    _to_chunks(q, N, C, 1, r_q, out=kq[..., C:, :])
    beta_v = _to_chunks(v, N, C, G, beta, out=buf("beta_v", N, B, H, G, C, V))
    Gc = chunk_log_decays(g, N, C, H, G).reshape(N * b, C)                  # log-decay from chunk start
    beta = beta.view(B, N, C, H, G).permute(1, 0, 3, 4, 2).reshape(N * b, C)
    gate = Gc.exp().to(q.dtype)

    # k k^T and q k^T in one product per q/k head ([k; q] k^T, the group's first value head's rows):
    # on this CPU one 2C-row product was faster than two C-row ones or four half-triangle ones.
    heads = kq[:, :, :, 0].flatten(0, 2)                                     # [N B H, 2C, K]
    kk_qk = torch.bmm(heads, heads[:, :C].transpose(-1, -2), out=buf("kk_qk", N * B * H, 2 * C, C))
    if use_qk_l2norm:                                                        # r_k = 1 / |k|, per value head
        r_k = l2norm_factors_from_squares(kk_qk[:, :C].diagonal(dim1=-2, dim2=-1))
        r_k = r_k.view(N, B, H, 1, C).expand(N, B, H, G, C).reshape(N * b, C)
        # D_ij r_j (j <= i) as e^{(G_i - G_j) + log r_j}: the keys' normalisation for k k^T and q k^T
        # in the decay matrix's one exp (exponents <= log(1 / sqrt(eps)): no overflow). The difference
        # first: log r_j added to G_j would round at G's ulp, 1e-4 of r_j where |G| ~ 2000.
        D = _decay_matrix(Gc, q.dtype, r_k.log(), out=buf("D", N * b, C, C))
        beta_r, to_end = beta * r_k, (Gc[:, -1:] - Gc).exp_().to(q.dtype).mul_(r_k)
    else:
        D = _decay_matrix(Gc, q.dtype, out=buf("D", N * b, C, C))    # e^{G_i - G_j}, j <= i
        beta_r, to_end = beta, (Gc[:, -1:] - Gc).exp_().to(q.dtype)
    kk_qk = kk_qk.view(N, B, H, 1, 2, C, C)
    D6 = D.view(N, B, H, G, 1, C, C)
    if G == 1:                                                               # scaled in place, one pass
        A_attn = kk_qk.mul_(D6)
    else:
        A_attn = torch.mul(kk_qk, D6, out=buf("A_attn", N, B, H, G, 2, C, C))
    A_attn = A_attn.view(N * b, 2, C, C)
    # A_ij = beta_i D_ij k_i . k_j, j < i (the inverse reads nothing else).
    A = A_attn[:, 0].mul_(beta_r[..., None])
    T_inv = unit_lower_inverse(A, out=buf("T_inv", N * b, C, C), buf=buf)
    attn = A_attn[:, 1].tril_()                                              # scale (q k^T) . D, causal
    chunks = lambda x: x.view(N, b, *x.shape[1:])
    return WalkFactors(kq=kq.view(N, b, 2 * C, K), beta_v=beta_v.view(N, b, C, V), T_inv=chunks(T_inv),
                       attn=chunks(attn), beta_gate=chunks((beta_r * gate)[..., None]),
                       to_end=chunks(to_end[..., None]), gate=chunks(gate[..., None]),
                       gamma=gate[:, -1].view(N, b, 1))


def _decay_matrix(Gc: torch.Tensor, dtype: torch.dtype, log_cols=None, out=None) -> torch.Tensor:
    """e^{G_i - G_j} ``[..., C, C]`` in ``dtype`` (``out``'s, when given) for j <= i, from the
    cumulative log decays Gc ``[..., C]`` (float64, chunk_log_decays: the differences round once),
    times e^{log_cols_j}, column j's factor, when ``log_cols [..., C]`` is given; 1 above the diagonal
    (the exponent is zeroed there first: no overflow for any g, and no inf times zero in a gradient).
    Callers that read the upper triangle mask it."""
    D = torch.sub(Gc[..., :, None], Gc[..., None, :], out=out).to(dtype)     # (out: no copy)
    if log_cols is not None:
        D.add_(log_cols[..., None, :])
    return D.tril_().exp_()


def unit_lower_inverse(A: torch.Tensor, out=None, buf=None) -> torch.Tensor:
    """``(I + A)^-1`` for strictly lower-triangular ``A`` ``[..., n, n]``, n a power of two (only A's
    strict lower triangle is read); into ``out`` when given, scratch from ``buf(name, *shape)`` (see
    :func:`gdn.ops.common.scratch`; None: fresh tensors).

    Bottom up over block sizes b = 1, 2, 4, ...: [[L11, 0], [L21, L22]]^-1 =
    [[L11^-1, 0], [-L22^-1 L21 L11^-1, L22^-1]]. The diagonal blocks of the inverse are the inverses
    of the diagonal blocks, so the result is built in place: the unit diagonal first, then per level
    only the lower-left b x b blocks of all 2b x 2b diagonal blocks, in one batched product pair (the
    1 x 1 level, -L21, needs none): log2(n) levels of matrix products, as the Triton kernel does.
    (torch.linalg.solve_triangular against the identity was as fast alone, and 1.3-2x slower inside
    the chunk algorithm on a 2-core CPU.)
    """
    n = A.shape[-1]
    batch = A.shape[:-2]
    A3 = A.reshape(-1, n, n)
    T = out.view(A3.shape) if out is not None else torch.empty_like(A3)
    T.zero_()
    T.diagonal(dim1=-2, dim2=-1).fill_(1)
    if n == 1:
        return T.view(A.shape)
    buf = buf or scratch(None, A)
    nb = A3.shape[0]
    track = torch.is_grad_enabled() and A.requires_grad
    first, dst = _diagonal_blocks(A3, 2)[..., 1:, :1], _diagonal_blocks(T, 2)[..., 1:, :1]
    if track:                                                            # out= does not record
        dst.copy_(-first)
    else:
        torch.neg(first, out=dst)
    b = 2
    while b < n:
        m = n // (2 * b)
        blocks = _diagonal_blocks(T, b)                                   # [nb, n / b, b, b]
        top, bottom = blocks[:, 0::2], blocks[:, 1::2]                   # the inverses so far
        if track:                         # autograd keeps the products' inputs: not views of T, written on
            top, bottom = top.clone(), bottom.clone()
        neg_L21 = torch.neg(_diagonal_blocks(A3, 2 * b)[..., b:, :b], out=buf(f"L21.{b}", nb, m, b, b))
        L22_L21 = torch.matmul(bottom, neg_L21, out=buf(f"L22L21.{b}", nb, m, b, b))
        lower = torch.matmul(L22_L21, top, out=buf(f"lower.{b}", nb, m, b, b))
        _diagonal_blocks(T, 2 * b)[..., b:, :b].copy_(lower)
        b *= 2
    return T.view(*batch, n, n)


def _diagonal_blocks(X: torch.Tensor, s: int) -> torch.Tensor:
    """The s x s diagonal blocks of ``X`` ``[..., n, n]`` as a view ``[..., n / s, s, s]``."""
    n = X.shape[-1]
    grid = X.unflatten(-1, (n // s, s)).unflatten(-3, (n // s, s))    # [..., n/s, s, n/s, s]
    return grid.diagonal(dim1=-4, dim2=-2).movedim(-1, -3)

"""The chunk math in one place: WY factors of a chunk and the affine map they define.

Split a sequence into chunks of C tokens. Inside a chunk, with G_t = g_1 + ... + g_t (within the
chunk) and the chunk-start state S0, every token's write u_t = beta_t (v_t - S_{t-1}^T k_t e^{g_t})
solves one unit-lower-triangular system (seed 002, the WY / UT transform):

    (I + A) U = beta * V  -  diag(beta e^G) K S0,      A_ij = beta_i e^{G_i - G_j} k_i . k_j   (j < i)

so U = u - w S0 with u = (I + A)^-1 (beta * V) and w = (I + A)^-1 (beta e^G * K), both independent of
S0. Everything else is matrix products:

    O      = scale * (q e^G) S0  +  scale * ((Q K^T) . D) U,       D_ij = e^{G_i - G_j}  (j <= i)
    S_end  = e^{G_C} S0 + (K e^{G_C - G})^T U

i.e. the chunk is the affine map S0 -> A_c S0 + B_c with

    A_c = gamma I - k_dec^T w      (gamma = e^{G_C}: one K x C by C x K product, never C dense K x K)
    B_c = k_dec^T u                (k_dec = K e^{G_C - G})

The chunk algorithm walks S through the chunks; the scan algorithm composes the (A_c, B_c) maps.
Decays are only ever formed as e^{(non-positive difference)}: nothing overflows for any g <= 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .common import buffer_or_empty, l2norm_factors, scratch


@dataclass
class ChunkFactors:
    """Per-chunk factors, chunk-major: N chunks of C tokens, value heads split as H groups of G
    (value head h reads q/k head h // G).

    q_dec:   ``[N, B, H, G, C, K]`` scale * q e^G
    attn:    ``[N, B, H, G, C, C]`` scale * (q k^T) . D, lower triangle with the diagonal
    w:       ``[N, B, H, G, C, K]`` (I + A)^-1 (beta e^G k)
    u:       ``[N, B, H, G, C, V]`` (I + A)^-1 (beta v)
    k_dec:   ``[N, B, H, G, C, K]`` e^{G_C - G} k, the keys as seen from the chunk's end
    gamma:   ``[N, B, H, G]`` e^{G_C}, the decay of the whole chunk
    States are ``[B, H, G, K, V]`` for one chunk, ``[N, B, H, G, K, V]`` for all. The methods write
    into ``out`` when given (no autograd then), else return fresh tensors.
    """

    q_dec: torch.Tensor
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

    def start_outputs(self, S0: torch.Tensor, n=slice(None), out=None) -> torch.Tensor:
        """q_dec S0 ``[..., C, V]``: the part of chunk(s) ``n``'s outputs that comes from the start state(s)."""
        q_dec = self.q_dec[n]
        O = torch.bmm(q_dec.flatten(0, -3), S0.flatten(0, -3), out=_flat(out))
        return O.view(*q_dec.shape[:-1], S0.shape[-1])

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
        """The outputs O = O_start + attn U of chunk(s) ``n`` (O_start, U ``[N, B, H, G, C, V]``) in the
        public layout ``[B, T, HV, V]``, padding dropped. With ``out`` (those chunks' rows of the
        result, ``[B, <= N C, HV, V]``) the sum is formed in O_start itself and copied into ``out``."""
        attn = self.attn[n].flatten(0, -3)
        if out is None:
            O = O_start.flatten(0, -3).baddbmm(attn, U.flatten(0, -3)).view(O_start.shape)
            N, B, H, G, C, V = O.shape
            return O.permute(1, 0, 4, 2, 3, 5).reshape(B, N * C, H * G, V)[:, : self.T]
        O_start.flatten(0, -3).baddbmm_(attn, U.flatten(0, -3))
        return _from_chunks(O_start, out)

    def outputs(self, starts: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
        """O = q_dec S_start + attn U for every chunk at once, in the public layout ``[B, T, HV, V]``."""
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
    given), rows optionally multiplied by ``row_scale`` ``[B, N*C, H*G]`` in the same pass."""
    B, _, HG, D = x.shape
    src = x.view(B, N, C, HG // G, G, D).permute(1, 0, 3, 4, 2, 5)
    scale = None if row_scale is None else _chunk_rows(row_scale, N, C, G)
    if out is None:
        return (src if scale is None else src * scale).contiguous()
    return out.copy_(src) if scale is None else torch.mul(src, scale, out=out)


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
    # One pass each into chunk-major layout; the l2 normalisation and the output scale ride along on
    # q, the normalisation on k, beta on v (u = (I + A)^-1 (beta v)).
    r_q = l2norm_factors(q) * scale if use_qk_l2norm else q.new_full(q.shape[:-1], scale)
    r_k = l2norm_factors(k) if use_qk_l2norm else None
    q = _to_chunks(q, N, C, 1, r_q, out=buf("q", N, B, H, 1, C, K))         # scale * q   [N, B, H, 1, C, K]
    k = _to_chunks(k, N, C, 1, r_k, out=buf("k", N, B, H, 1, C, K))         # [N, B, H, 1, C, K]
    v = _to_chunks(v, N, C, G, beta, out=buf("v", N, B, H, G, C, V))        # beta * v    [N, B, H, G, C, V]
    Gc = g.view(B, N, C, H, G).permute(1, 0, 3, 4, 2).cumsum(-1)            # [N, B, H, G, C] log-decay from chunk start
    beta = beta.view(B, N, C, H, G).permute(1, 0, 3, 4, 2)                  # [N, B, H, G, C]
    gate = Gc.exp()                                                         # e^G
    D = _decay_matrix(Gc, out=buf("D", N, B, H, G, C, C))                   # e^{G_i - G_j}, j <= i

    kt = k.transpose(-1, -2)
    kk = torch.matmul(k, kt, out=buf("kk", N, B, H, 1, C, C))               # shared by the group
    # A_ij = beta_i D_ij k_i . k_j (j < i; its diagonal and upper triangle are never read).
    A = torch.mul(kk, D, out=buf("A", N, B, H, G, C, C)).mul_(beta[..., None])
    T_inv = unit_lower_inverse(A, out=buf("T_inv", N, B, H, G, C, C), buf=buf)
    u = torch.matmul(T_inv, v, out=buf("u", N, B, H, G, C, V))               # (I + A)^-1 beta V
    # w = (I + A)^-1 diag(beta e^G) K: the scaling on T^-1's C columns, not on K's K columns.
    T_w = torch.mul(T_inv, (beta * gate)[..., None, :], out=buf("T_w", N, B, H, G, C, C))
    w = torch.matmul(T_w, k.expand(N, B, H, G, C, K), out=buf("w", N, B, H, G, C, K))
    qk = torch.matmul(q, kt, out=buf("qk", N, B, H, 1, C, C))
    attn = torch.mul(qk, D, out=buf("attn", N, B, H, G, C, C)).tril_()      # scale (q k^T) . D, causal
    q_dec = torch.mul(q, gate[..., None], out=buf("q_dec", N, B, H, G, C, K))
    k_dec = torch.mul(k, (Gc[..., -1:] - Gc).exp_()[..., None], out=buf("k_dec", N, B, H, G, C, K))
    return ChunkFactors(q_dec=q_dec, attn=attn, w=w, u=u, k_dec=k_dec, gamma=gate[..., -1], T=T)


def _decay_matrix(Gc: torch.Tensor, out=None) -> torch.Tensor:
    """e^{G_i - G_j} ``[..., C, C]`` for j <= i, from the cumulative log decays Gc ``[..., C]``; 1 above
    the diagonal (the exponent is zeroed there first: no overflow for any g, and no inf times zero in
    a gradient). Callers that read the upper triangle mask it."""
    D = torch.sub(Gc[..., :, None], Gc[..., None, :], out=out)
    return D.tril_().exp_()


def unit_lower_inverse(A: torch.Tensor, out=None, buf=None) -> torch.Tensor:
    """``(I + A)^-1`` for strictly lower-triangular ``A`` ``[..., n, n]``, n a power of two (only A's
    strict lower triangle is read); into ``out`` when given, scratch from ``buf(name, *shape)`` (see
    :func:`gdn.ops.common.scratch`; None: fresh tensors).

    Bottom up over block sizes b = 1, 2, 4, ...: [[L11, 0], [L21, L22]]^-1 =
    [[L11^-1, 0], [-L22^-1 L21 L11^-1, L22^-1]] turns the inverses of all b x b diagonal blocks, kept
    contiguous ``[..., n / b, b, b]`` (so the products read them without copies), into those of the
    2b x 2b blocks in one batched product per level: log2(n) levels of matrix products, as the Triton
    kernel does. (A batched torch.linalg.solve_triangular against the identity was as fast inside
    the chunk algorithm on a 2-core CPU, and is unmeasured on GPUs.)
    """
    n = A.shape[-1]
    if n == 1:
        return torch.ones_like(A) if out is None else out.fill_(1)
    batch = A.shape[:-2]
    buf = buf or scratch(None, A)
    inv = torch.ones(*batch, n, 1, 1, dtype=A.dtype, device=A.device)       # the 1 x 1 diagonal blocks
    b = 1
    while b < n:
        m = n // (2 * b)
        top, bottom = inv.unflatten(-3, (m, 2)).unbind(-3)                  # [..., m, b, b] each
        neg_L21 = torch.neg(_diagonal_blocks(A, 2 * b)[..., b:, :b], out=buf(f"L21.{b}", *batch, m, b, b))
        L22_L21 = torch.matmul(bottom, neg_L21, out=buf(f"L22L21.{b}", *batch, m, b, b))
        lower = torch.matmul(L22_L21, top, out=buf(f"lower.{b}", *batch, m, b, b))
        shape = (*batch, m, 2 * b, 2 * b)
        last = 2 * b == n and out is not None
        nxt = out.view(shape) if last else buffer_or_empty(buf(f"inv.{2 * b}", *shape), shape, A)
        nxt[..., :b, :b] = top
        nxt[..., :b, b:] = 0
        nxt[..., b:, :b] = lower
        nxt[..., b:, b:] = bottom
        inv = nxt
        b *= 2
    return inv.view(A.shape)


def _diagonal_blocks(X: torch.Tensor, s: int) -> torch.Tensor:
    """The s x s diagonal blocks of ``X`` ``[..., n, n]`` as a view ``[..., n / s, s, s]``."""
    n = X.shape[-1]
    grid = X.unflatten(-1, (n // s, s)).unflatten(-3, (n // s, s))    # [..., n/s, s, n/s, s]
    return grid.diagonal(dim1=-4, dim2=-2).movedim(-1, -3)

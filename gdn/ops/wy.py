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

from .common import l2norm_factors


@dataclass
class ChunkFactors:
    """Per-chunk factors, chunk-major: N chunks of C tokens, value heads split as H groups of G
    (value head h reads q/k head h // G).

    q_dec:   ``[N, B, H, G, C, K]`` scale * q e^G
    attn:    ``[N, B, H, G, C, C]`` scale * (q k^T) . D, lower triangle with the diagonal
    w:       ``[N, B, H, G, C, K]`` (I + A)^-1 (beta e^G k)
    u:       ``[N, B, H, G, C, V]`` (I + A)^-1 (beta v)
    k_t:     ``[N, B, H, 1, K, C]`` k^T (a view of the contiguous keys)
    tail_decay: ``[N, B, H, G, C]`` e^{G_C - G}: k_dec = diag(tail_decay) k
    gamma:   ``[N, B, H, G]`` e^{G_C}, the decay of the whole chunk
    States are ``[B, H, G, K, V]`` for one chunk, ``[N, B, H, G, K, V]`` for all.
    """

    q_dec: torch.Tensor
    attn: torch.Tensor
    w: torch.Tensor
    u: torch.Tensor
    k_t: torch.Tensor
    tail_decay: torch.Tensor
    gamma: torch.Tensor
    T: int

    @property
    def num_chunks(self) -> int:
        return self.u.shape[0]

    def writes(self, S0: torch.Tensor, n=slice(None), out=None) -> torch.Tensor:
        """U = u - w S0: what the tokens of chunk(s) ``n`` really write, from start state(s) ``S0``
        (into ``out`` when given)."""
        u = self.u[n]
        args = (u.flatten(0, -3), self.w[n].flatten(0, -3), S0.flatten(0, -3))
        if out is None:
            return torch.baddbmm(*args, alpha=-1).view(u.shape)
        return torch.baddbmm(*args, alpha=-1, out=out.view(args[0].shape)).view(u.shape)

    def end_state(self, S0: torch.Tensor, U: torch.Tensor, n: int, out=None) -> torch.Tensor:
        """S_end = gamma S0 + k_dec^T U = gamma S0 + k^T (diag(e^{G_C - G}) U) for chunk ``n``
        (scaling the C x V writes, not a K x C copy of the keys); into ``out`` when given."""
        U = U * self.tail_decay[n, ..., None]
        k_t = self.k_t[n].expand(*S0.shape[:-2], *self.k_t.shape[-2:])
        if out is None:
            S = self.gamma[n, ..., None, None] * S0
            return torch.baddbmm(S.flatten(0, -3), k_t.flatten(0, -3), U.flatten(0, -3)).view(S0.shape)
        # No autograd here: in place. One scalar a state, broadcast over a flat row (a trailing
        # [1, 1] broadcast takes torch's slow elementwise path on CPUs).
        torch.mul(S0.reshape(-1, S0.shape[-2] * S0.shape[-1]), self.gamma[n].reshape(-1, 1),
                  out=out.view(-1, S0.shape[-2] * S0.shape[-1]))
        out.view(-1, *out.shape[-2:]).baddbmm_(k_t.flatten(0, -3), U.flatten(0, -3))
        return out

    def outputs(self, starts: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
        """O = q_dec S_start + attn U for every chunk at once, in the public layout ``[B, T, HV, V]``."""
        O = torch.bmm(self.attn.flatten(0, -3), U.flatten(0, -3))
        O = O.baddbmm(self.q_dec.flatten(0, -3), starts.flatten(0, -3)) if O.requires_grad else \
            O.baddbmm_(self.q_dec.flatten(0, -3), starts.flatten(0, -3))
        O = O.view(U.shape)
        N, B, H, G, C, V = O.shape
        return O.permute(1, 0, 4, 2, 3, 5).reshape(B, N * C, H * G, V)[:, : self.T]

    def affine_maps(self):
        """(A_c ``[N, B, H, G, K, K]``, B_c ``[N, B, H, G, K, V]``) with S_end = A_c S0 + B_c."""
        K = self.w.shape[-1]
        eye = torch.eye(K, dtype=self.w.dtype, device=self.w.device)
        k_dec_t = self.k_t * self.tail_decay[..., None, :]
        A = self.gamma[..., None, None] * eye - k_dec_t @ self.w
        B = k_dec_t @ self.u
        return A, B


def _to_chunks(x: torch.Tensor, N: int, C: int, G: int, row_scale=None) -> torch.Tensor:
    """``[B, N*C, H*G, D]`` -> contiguous chunk-major ``[N, B, H, G, C, D]``, rows optionally
    multiplied by ``row_scale`` ``[B, N*C, H*G]`` in the same pass over memory."""
    B, _, HG, D = x.shape
    src = x.view(B, N, C, HG // G, G, D).permute(1, 0, 3, 4, 2, 5)
    if row_scale is None:
        return src.contiguous()
    scale = row_scale.view(B, N, C, HG // G, G, 1).permute(1, 0, 3, 4, 2, 5)
    if torch.is_grad_enabled() and (x.requires_grad or row_scale.requires_grad):
        return (src * scale).contiguous()
    out = torch.empty(src.shape, dtype=x.dtype, device=x.device)
    return torch.mul(src, scale, out=out)


def chunk_factors(q, k, v, g, beta, scale: float, chunk_size: int, use_qk_l2norm: bool = False) -> ChunkFactors:
    """WY factors of every chunk. q, k ``[B, T, H, K]``; v ``[B, T, HV, V]``; g, beta ``[B, T, HV]``,
    all in the compute dtype; ``use_qk_l2norm`` normalises q and k on their way into chunk layout.

    The sequence is padded to a multiple of ``chunk_size`` with g = beta = 0 and zero q/k/v: a padded
    token's map is the identity, so it changes neither the state nor any real output. Per-token
    scalings are applied to C x C matrices where the algebra allows (diag(beta) on T's columns): on
    a CPU every pass over a T x K tensor costs about as much as a matrix product.
    """
    B, T, H, K = q.shape
    G = v.shape[2] // H
    C = chunk_size
    pad = (-T) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, 0, 0, pad)), F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // C
    # One pass into chunk-major layout (the l2 normalisation rides along); every product below is
    # then a plain batched matmul.
    r_q, r_k = (l2norm_factors(x) if use_qk_l2norm else None for x in (q, k))
    q = _to_chunks(q, N, C, 1, r_q)                                           # [N, B, H, 1, C, K]
    k = _to_chunks(k, N, C, 1, r_k)                                           # [N, B, H, 1, C, K]
    v = _to_chunks(v, N, C, G)                                                # [N, B, H, G, C, V]
    g = g.view(B, N, C, H, G).permute(1, 0, 3, 4, 2)                          # [N, B, H, G, C]
    beta = beta.view(B, N, C, H, G).permute(1, 0, 3, 4, 2)                    # [N, B, H, G, C]

    Gc = g.cumsum(-1)                                                     # log-decay from chunk start
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    D = (Gc[..., :, None] - Gc[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    kt = k.transpose(-1, -2)
    A = (beta[..., :, None] * (k @ kt) * D).tril(-1)                      # k k^T shared by the group
    T_inv = unit_lower_inverse(A)
    u = (T_inv * beta[..., None, :]) @ v                                  # (I + A)^-1 diag(beta) V
    w = (T_inv * (beta * Gc.exp())[..., None, :]) @ k                     # (I + A)^-1 diag(beta e^G) K
    attn = (q @ kt) * (scale * D)
    q_dec = q * (scale * Gc.exp())[..., None]
    return ChunkFactors(q_dec=q_dec.expand(N, B, H, G, C, K).contiguous(), attn=attn, w=w, u=u, k_t=kt,
                        tail_decay=(Gc[..., -1:] - Gc).exp(), gamma=Gc[..., -1].exp(), T=T)


def unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """``(I + A)^-1`` for strictly lower-triangular ``A`` ``[..., n, n]``, n a power of two.

    Block recursion [[L11, 0], [L21, L22]]^-1 = [[L11^-1, 0], [-L22^-1 L21 L11^-1, L22^-1]], both
    diagonal blocks inverted in one batched call per level: log2(n) levels of matrix products, which
    CPUs and GPUs run far faster than a batched triangular solve (and the Triton kernel does the same).
    """
    n = A.shape[-1]
    if n == 1:
        return torch.ones_like(A)
    h = n // 2
    inv = unit_lower_inverse(torch.stack([A[..., :h, :h], A[..., h:, h:]]))
    i11, i22 = inv[0], inv[1]
    i21 = -(i22 @ A[..., h:, :h]) @ i11
    return torch.cat([torch.cat([i11, torch.zeros_like(i11)], dim=-1), torch.cat([i21, i22], dim=-1)], dim=-2)

"""Which roundings of the Triton walk the output and the state can afford (a CPU question, no GPU).

The Triton walk (gdn/ops/triton/chunk_fwd.py and walk_f16.py) forms, per chunk of 64 tokens,

    Z  = v - (r_k e^G) . (k S)                        # S rounded
    U  = T diag(beta) Z                                # T and Z rounded
    o  = scale r_q e^G . (q S) + P U                   # S; P and U rounded; o rounded to bf16
    S <- e^{G_C} S + k^T ((r_k e^{G_C - G}) . U)       # U rounded

on 16-bit matrix units, each computed fp32 operand rounded: to 1 or 2 bf16 parts (gdn.ops.triton.
split_dot), or to one fp16 value (walk_f16). This script replays that walk in float64 with the chosen
roundings, on bf16 inputs, and prints the relative error of o and of the final state against the
exact float64 walk, for both gate regimes of GUIDE.md section 2 (benchmarks/NOTES.md v11 has the
table it printed). A rounding is "b1", "b2" (bf16 parts), "h" (fp16) or "" (exact).

The in-chunk inverse T = (I + A)^-1 is exact unless ``inverse`` names one of the WY pass's product
algorithms (gdn/ops/triton/inverse.py), replayed with its operands rounded as the matrix units take them
(benchmarks/NOTES.md v18). ``--keys smooth`` draws keys that drift slowly along the sequence (each
close to its neighbours, as a model's keys often are), where the inverse's partial products grow.

    python benchmarks/precision_study.py [--T 2048] [--heads 4] [--keys random|smooth]
"""
from __future__ import annotations

import argparse

import torch

from gdn.cli.timing import random_problem

C = 64


def rounded(x: torch.Tensor, how: str) -> torch.Tensor:
    """x as the matrix units would see it: "" exact, "b1" / "b2" one or two bf16 parts, "h" fp16."""
    if how == "h":
        return x.to(torch.float16).to(x.dtype)
    out = torch.zeros_like(x)
    rest = x
    for _ in range({"": 0, "b1": 1, "b2": 2}[how]):
        part = rest.to(torch.bfloat16).to(x.dtype)
        out, rest = out + part, rest - part
    return x if how == "" else out


def dot_f16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b on fp16 matrix units: each operand rounded to fp16 once."""
    return rounded(a, "h") @ rounded(b, "h")


def dot_f16x2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b from pairs of fp16 parts (split_dot.dot_f16x2): a_2 b_1 + a_1 b_2 + a_1 b_1."""
    a1, b1 = rounded(a, "h"), rounded(b, "h")
    a2, b2 = rounded(a - a1, "h"), rounded(b - b1, "h")
    return a2 @ b1 + a1 @ b2 + a1 @ b1


def unit_lower_inverse(A: torch.Tensor, how: str, block: int = 16) -> torch.Tensor:
    """(I + A)^-1 for strictly lower A [n, C, C] as the WY pass forms it. Both algorithms first invert
    the block x block diagonal blocks as (I - A_d)(I + A_d^2)(I + A_d^4)(I + A_d^8) from fp16 pairs
    (X), with N = X A_off. how="f16x2 product": then (I - N)(I + N^2) X from fp16 pairs (v13's merge);
    "fp16 substitution": T <- X - N T from T = X, once a block row below the first, on plain fp16
    products (block forward substitution: no binomially growing partial products); "fp16 substitution
    everywhere": the diagonal blocks too, from their 4 x 4 blocks' (I - A4)(I + A4^2) by the same
    substitution, all on plain fp16 products (inverse.inverse_subst)."""
    n = A.shape[-1]
    if how == "fp16 substitution everywhere":
        X16 = _substitution(torch.where(_blocks(n, block), A, 0.0), _inverse_4x4_f16(A), 4)
        return _substitution(A, X16, block)
    eye_b = torch.eye(block, dtype=A.dtype)
    same = _blocks(n, block)
    blocks = A.unflatten(-1, (n // block, block)).unflatten(-3, (n // block, block))
    Ad = torch.diagonal(blocks, dim1=-4, dim2=-2).permute(0, 3, 1, 2)      # [chunks, NB, block, block]
    X, P = eye_b - Ad, Ad
    for _ in range(3):
        P = dot_f16x2(P, P)
        X = dot_f16x2(X, eye_b + P)
    X = torch.stack([torch.block_diag(*x) for x in X])
    if how == "f16x2 product":
        N = dot_f16x2(X, torch.where(same, 0.0, A))
        eye = torch.eye(n, dtype=A.dtype)
        return dot_f16x2(dot_f16x2(eye - N, eye + dot_f16x2(N, N)), X)
    return _substitution(A, X, block)


def _blocks(n: int, block: int) -> torch.Tensor:
    """The [n, n] mask of the block x block diagonal blocks."""
    return torch.block_diag(*[torch.ones(block, block)] * (n // block)).bool()


def _inverse_4x4_f16(A: torch.Tensor) -> torch.Tensor:
    """The inverses of the 4 x 4 diagonal blocks of I + A as (I - A4)(I + A4^2), on fp16 products."""
    A4 = torch.where(_blocks(A.shape[-1], 4), A, 0.0)
    eye = torch.eye(A.shape[-1], dtype=A.dtype)
    return dot_f16(eye - A4, eye + dot_f16(A4, A4))


def _substitution(A: torch.Tensor, X: torch.Tensor, block: int) -> torch.Tensor:
    """(I + A)^-1 from X, the inverses of its block x block diagonal blocks: T <- X - N T, N = X A_off."""
    N = dot_f16(X, torch.where(_blocks(A.shape[-1], block), 0.0, A))
    T = X
    for _ in range(A.shape[-1] // block - 1):
        T = X - dot_f16(N, T)
    return T


def walk(q, k, v, g, beta, *, S="", Z="", T="", P="", U="", qk="", inverse="", ahead=None, o_bf16=True):
    """One (sequence, head) in float64: q, k [T, K], v [T, V], g, beta [T], the values of bf16 inputs.
    The keywords say how each operand is rounded; qk: q and k normalised and then rounded (else the
    norm factors scale the fp32 results); inverse: unit_lower_inverse's algorithm ("" exact). ahead
    (a rounding, or None): the next chunk's k S formed a chunk ahead, off the chain that carries the
    state, as e^{G_C} k' S + (k' k^T) (e^{G_C - G} U) with k' the next chunk's keys and k' k^T rounded
    so (NOTES.md v19's lookahead); None: from the new state, k' S'. Returns o (rounded to bf16 unless
    o_bf16=False) and S."""
    n, Kd = q.shape[0] // C, q.shape[1]
    scale = Kd ** -0.5
    q, k, v, g, beta = (x.reshape(n, C, *x.shape[1:]) for x in (q, k, v, g, beta))
    rq, rk = (q * q).sum(-1).add(1e-6).rsqrt(), (k * k).sum(-1).add(1e-6).rsqrt()
    G = g.cumsum(-1)
    D = (G[:, :, None] - G[:, None, :]).tril().exp().tril()
    A = (beta[:, :, None] * (k @ k.transpose(-1, -2)) * rk[:, :, None] * rk[:, None, :] * D).tril(-1)
    eye = torch.eye(C, dtype=q.dtype)
    Ti = unit_lower_inverse(A, inverse) if inverse else torch.linalg.solve_triangular(eye + A, eye.expand_as(A),
                                                                                       upper=False)
    Tb = rounded(Ti * beta[:, None, :], T)
    Pm = rounded((q @ k.transpose(-1, -2)) * D * (scale * rq)[:, :, None] * rk[:, None, :], P)
    if qk:                       # normalised, then rounded: the norm factors leave the fp32 results
        q, k = rounded(q * rq[..., None], qk), rounded(k * rk[..., None], qk)
        rq, rk = torch.ones_like(rq), torch.ones_like(rk)
    state = torch.zeros(Kd, v.shape[-1], dtype=q.dtype)
    o = torch.empty_like(v)
    kS = k[0] @ rounded(state, S)
    for c in range(n):
        eG = G[c].exp()
        Uc = Tb[c] @ rounded(v[c] - (rk[c] * eG)[:, None] * kS, Z)
        o[c] = (scale * rq[c] * eG)[:, None] * (q[c] @ rounded(state, S)) + Pm[c] @ rounded(Uc, U)
        decay = rk[c] * (G[c, -1] - G[c]).exp()
        Ud = rounded(decay[:, None] * Uc, U)
        if c + 1 < n and ahead is not None:
            kS = G[c, -1].exp() * (k[c + 1] @ rounded(state, S)) + rounded(k[c + 1] @ k[c].T, ahead) @ Ud
        state = G[c, -1].exp() * state + k[c].T @ Ud
        if c + 1 < n and ahead is None:
            kS = k[c + 1] @ rounded(state, S)
    o = o.reshape(n * C, -1)
    return (o.to(torch.bfloat16).double() if o_bf16 else o), state


VARIANTS = {
    "two bf16 parts everywhere (v10)": dict(S="b2", Z="b2", T="b2", P="b2", U="b2"),
    "one bf16 part, q and k rounded (FLA)": dict(S="b1", Z="b1", T="b1", P="b1", U="b1", qk="b1"),
    "one bf16 part, norms folded": dict(S="b1", Z="b1", T="b1", P="b1", U="b1"),
    "one fp16 operand everywhere (v11)": dict(S="h", Z="h", T="h", P="h", U="h", qk="h"),
    "v11, T from fp16 pairs (v13's inverse)": dict(S="h", Z="h", T="h", P="h", U="h", qk="h",
                                                    inverse="f16x2 product"),
    "v11, T's merge by fp16 substitution (v18)": dict(S="h", Z="h", T="h", P="h", U="h", qk="h",
                                                       inverse="fp16 substitution"),
    "v11, T by fp16 substitution everywhere (v19)": dict(S="h", Z="h", T="h", P="h", U="h", qk="h",
                                                          inverse="fp16 substitution everywhere"),
    "v19, k S a chunk ahead, k' k^T in fp16": dict(S="h", Z="h", T="h", P="h", U="h", qk="h",
                                                    inverse="fp16 substitution everywhere", ahead="h"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--keys", choices=("random", "smooth"), default="random")
    args = ap.parse_args()
    for gates in ("decaying", "long"):
        inputs = random_problem(1, args.T, args.heads, args.heads, 128, 128, dtype=torch.bfloat16, gates=gates,
                                seed=1)
        if args.keys == "smooth":               # a slow random walk: each key near its neighbours
            gen = torch.Generator().manual_seed(2)
            k = torch.randn(1, 1, args.heads, 128, generator=gen) * 4
            k = k + 0.15 * torch.randn(1, args.T, args.heads, 128, generator=gen).cumsum(1)
            inputs = (inputs[0], k.bfloat16(), *inputs[2:])
        heads = [tuple(x.double()[0, :, h] for x in inputs) for h in range(args.heads)]
        exact = [walk(*x, o_bf16=False) for x in heads]
        o_ref, S_ref = torch.stack([e[0] for e in exact]), torch.stack([e[1] for e in exact])
        print(f"gates={gates}, keys={args.keys}, T={args.T}, {args.heads} heads of 128 (o includes its rounding "
              "to bf16)")
        for name, kw in VARIANTS.items():
            got = [walk(*x, **kw) for x in heads]
            o, S = torch.stack([x[0] for x in got]), torch.stack([x[1] for x in got])
            eo = ((o - o_ref).norm() / o_ref.norm()).item()
            es = ((S - S_ref).norm() / S_ref.norm()).item()
            print(f"  {name:40s} o {eo:.3e}  S {es:.3e}")


if __name__ == "__main__":
    main()

"""How many warm-up chunks a certified split needs (a CPU question, float64; benchmarks/NOTES.md v19's
lead for B = 1 with decaying gates).

A segment of a long sequence can start from a zero state W chunks before its first token instead
of waiting for the exact state, if it can prove the difference negligible. With l2-normalised keys
and beta in [0, 2], ||I - beta k k^T||_2 <= 1 and ||beta k v^T||_2 = |beta| |v|, so

    ||S_t||_2 <= B_t,   B_t = e^{g_t} B_{t-1} + |beta_t| |v_t|     (B_0 = ||S_0||_2)

and the state's part from before the window shrinks through it by at least e^{G_W}, the window's
summed log-decay: ||S_exact - S_warm||_2 <= e^{G_W} B_(window start). The certificate is
e^{G_W} B <= 2^-30 ||S_warm||_F / sqrt(min(K, V)) (the Frobenius norm over sqrt(rank) is below
the spectral norm), i.e. the state is right to well below fp32's rounding. This script walks the
recurrence in float64 for both gate regimes of GUIDE.md section 2, asserts the bound at every
segment start, and prints for each window the share of starts that certify, the largest bound on
the relative error there, and the largest error measured against the exact state.

The posterior check (split_check="posterior", the default since v30) measures instead of bounding:
column j certifies where 4 e^{G_W} |S_exact(window start)_j| <= 2^-30 max_i |S_warm ij| (the
kernel's margin of 4 included). The script prints the share of (start, head) pairs whose every
column certifies that way too.

    python benchmarks/split_certificate.py [--T 16384] [--heads 4] [--segment 4096]
"""
from __future__ import annotations

import argparse
import math

import torch

from gdn.cli.timing import random_problem

C = 64


def walk(k, v, g, beta, S, B, start, end):
    """The token recurrence from ``start`` to ``end`` on states S [H, K, V] and bounds B [H] (float64;
    k l2-normalised [T, H, K], v [T, H, V], g, beta [T, H])."""
    for t in range(start, end):
        kt, vt = k[t], v[t]
        S = torch.exp(g[t])[:, None, None] * S
        S = S + beta[t][:, None, None] * kt[:, :, None] * (vt - torch.einsum("hkv,hk->hv", S, kt))[:, None, :]
        B = torch.exp(g[t]) * B + beta[t].abs() * vt.norm(dim=-1)
    return S, B


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--segment", type=int, default=4096, help="tokens a segment (its starts are checked)")
    ap.add_argument("--windows", default="2,4,8,12,16,24,32", help="warm-up windows, in chunks")
    args = ap.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    for gates in ("decaying", "long"):
        q, k, v, g, beta = random_problem(1, args.T, args.heads, args.heads, 128, 128, dtype=torch.float64,
                                          gates=gates, seed=1)
        k = k[0] / k[0].norm(dim=-1, keepdim=True)
        v, g, beta = v[0].double(), g[0].double(), beta[0].double()
        H, K, V = k.shape[1], k.shape[2], v.shape[2]
        starts = list(range(args.segment, args.T, args.segment))
        # The exact states and bounds at every token a window may start from, in one pass.
        marks = sorted({s - w * C for s in starts for w in windows if s - w * C >= 0} | set(starts))
        S, B = torch.zeros(H, K, V, dtype=torch.float64), torch.zeros(H, dtype=torch.float64)
        exact, t = {}, 0
        for m in marks:
            S, B = walk(k, v, g, beta, S, B, t, m)
            exact[m], t = (S.clone(), B.clone()), m
        G = torch.cat([torch.zeros(1, H, dtype=torch.float64), g.cumsum(0)])
        print(f"gates={gates}, T={args.T}, {H} heads of 128, segment starts every {args.segment} tokens "
              f"(mean g {g.mean().item():.2e})")
        for w in windows:
            ok = total = post_ok = 0
            worst_bound = worst_err = 0.0
            for s in starts:
                a = s - w * C
                if a < 0:
                    continue
                S_warm, _ = walk(k, v, g, beta, torch.zeros(H, K, V, dtype=torch.float64),
                                 torch.zeros(H, dtype=torch.float64), a, s)
                S_ex, _ = exact[s]
                S_a, B_a = exact[a]
                bound = torch.exp(G[s] - G[a]) * B_a                                  # per head
                # The posterior check, column by column: [H, V] norms of the true state at the window's
                # start against the warmed-up state's column maxima.
                post = 4 * torch.exp(G[s] - G[a])[:, None] * S_a.norm(dim=1) <= 2.0 ** -30 * S_warm.abs().amax(1)
                post_ok += int(post.all(dim=1).sum())
                norm_warm = S_warm.flatten(1).norm(dim=1) / math.sqrt(min(K, V))     # <= spectral norm
                certified = bound <= 2.0 ** -30 * norm_warm
                diff = (S_warm - S_ex).flatten(1).norm(dim=1)
                # The theorem itself: ||S_ex - S_warm||_2 <= e^{G_W} B, so in Frobenius norm at most
                # sqrt(rank) times that (1e-12: float64's own rounding where both are ~0).
                assert (diff <= math.sqrt(min(K, V)) * bound * (1 + 1e-9) + 1e-12).all(), (diff, bound)
                err = diff / S_ex.flatten(1).norm(dim=1)
                ok += int(certified.sum())
                total += H
                worst_bound = max(worst_bound, float((bound / norm_warm).max()))
                worst_err = max(worst_err, float(err.max()))
            print(f"  window {w:3d} chunks: certified {ok}/{total}, relative bound <= {worst_bound:.1e}, "
                  f"measured error <= {worst_err:.1e}; posterior check certifies {post_ok}/{total}")


if __name__ == "__main__":
    main()

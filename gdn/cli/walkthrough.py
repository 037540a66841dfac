"""Seed 002's 3-token example, printed step by step by all three algorithms."""
from __future__ import annotations

import torch

from ..ops.scan import prefix_states
from ..ops.wy import chunk_factors

K = [[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]      # keys (unit length)
V = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]      # values
Q = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]      # queries
BETA = [1.0, 1.0, 0.5]                        # write strengths; no decay (g = 0), scale 1


def _r(x):
    return [round(float(a), 3) + 0.0 for a in x]


def print_walkthrough(print=print) -> None:
    k, v, q, beta = (torch.tensor(x, dtype=torch.float64) for x in (K, V, Q, BETA))
    print("1. recurrent: token by token, from an empty state")
    S = torch.zeros(2, 2, dtype=torch.float64)
    for t in range(3):
        pred = S.T @ k[t]
        u = beta[t] * (v[t] - pred)
        S = S + torch.outer(k[t], u)
        print(f"   token {t + 1}: state predicts {_r(pred)}, writes u{t + 1} = {_r(u)}, output {_r(S.T @ q[t])}")
    print(f"   final state {[_r(row) for row in S]}")

    print("2. chunk: the three writes from one triangular system (I + A) U = beta * V")
    A = torch.tril(beta[:, None] * (k @ k.T), -1)
    print(f"   A = {[_r(row) for row in A]}")
    f = chunk_factors(q.reshape(1, 3, 1, 2), k.reshape(1, 3, 1, 2), v.reshape(1, 3, 1, 2),
                      torch.zeros(1, 3, 1, dtype=torch.float64), beta.reshape(1, 3, 1),
                      scale=1.0, chunk_size=4)                    # one chunk (padded to 4 tokens)
    S0 = torch.zeros(1, 1, 1, 2, 2, dtype=torch.float64)         # [B, H, G, K, V]
    U = f.writes(S0, 0)                                           # [B, H, G, C, V]
    O = f.outputs(S0[None], U[None])                              # [B, T, HV, V]
    print(f"   U = {[_r(row) for row in U[0, 0, 0, :3]]}")
    print(f"   outputs = tril(Q K^T) U = {[_r(row) for row in O[0, :, 0]]}")
    print(f"   final state = K^T U = {[_r(row) for row in f.end_state(S0, U, 0)[0, 0, 0]]}")

    print("3. scan: the chunk as one affine map S -> A_c S + B_c (A_c = gamma I - k_dec^T w)")
    A_c, B_c = f.affine_maps()                                    # [N, B, H, G, K, K|V]
    print(f"   A_c = {[_r(row) for row in A_c[0, 0, 0, 0]]}, B_c = {[_r(row) for row in B_c[0, 0, 0, 0]]}")
    S_end = prefix_states(A_c, B_c, S0)[-1]            # [N + 1, ...]: the last is the final state
    print(f"   prefix scan from the empty state: final state {[_r(row) for row in S_end[0, 0, 0]]}")
    print("   every number agrees: the writes of the recurrence are the rows of U.")

"""What one Gated DeltaNet layer carries from one forward call to the next (prefill -> decode).

Per sequence: the last W-1 inputs of the short conv, and the K x V recurrent state of every value
head. Both have a fixed size whatever the context length: that is the point of linear attention.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class GatedDeltaNetCache:
    """Per-layer state; empty until the first forward call with this cache fills it.

    Attributes:
        conv_state: ``[N, conv_dim, W-1]`` the last W-1 conv inputs (q/k/v channels, oldest first),
            in the activations' dtype, or None before the first call.
        recurrent_state: ``[N, HV, K, V]`` float32 state of the delta rule, or None before the first call.
    """

    conv_state: torch.Tensor | None = None
    recurrent_state: torch.Tensor | None = None

    @property
    def is_empty(self) -> bool:
        """True until a forward call has stored states."""
        return self.recurrent_state is None

    @property
    def batch_size(self) -> int:
        """N: sequences held (0 when empty)."""
        return 0 if self.recurrent_state is None else self.recurrent_state.shape[0]

    def update(self, conv_state: torch.Tensor, recurrent_state: torch.Tensor) -> None:
        """Store the states after a forward call."""
        self.conv_state = conv_state
        self.recurrent_state = recurrent_state

    def reset(self) -> None:
        """Forget everything (the next call starts from zero states)."""
        self.conv_state = None
        self.recurrent_state = None

    def select(self, index: torch.Tensor) -> None:
        """Keep (or reorder, repeat) sequences by ``index`` ``[N']`` long (a tensor, or a list of ints):
        beam search reordering."""
        if self.is_empty:
            return
        # Checked in its own dtype (lists and arrays too): cast to long first, [True, False] would read
        # as the sequence numbers 1, 0 and 2.5 as 2.
        index = torch.as_tensor(index)
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise TypeError(f"index must hold integers (sequence numbers), got {index.dtype}")
        index = index.to(dtype=torch.long, device=self.recurrent_state.device)
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D [N'], got shape {tuple(index.shape)}")
        self.conv_state = self.conv_state.index_select(0, index)
        self.recurrent_state = self.recurrent_state.index_select(0, index)

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

    def check(self, conv_shape: tuple, recurrent_shape: tuple) -> None:
        """Before a call continues from this cache: both states set, or neither (one alone would
        restart the conv from zeros, or drop the state, with no error), each of its expected shape
        (``conv_shape`` ``[N, conv_dim, W-1]``, ``recurrent_shape`` ``[N, HV, K, V]``). Raises
        ValueError naming the field."""
        if (self.conv_state is None) != (self.recurrent_state is None):
            empty = "conv_state" if self.conv_state is None else "recurrent_state"
            raise ValueError(f"cache.{empty} is None but the other state is set: a cache holds both states "
                             "(after a forward call) or neither (before one; reset() empties it)")
        for name, x, shape in (("conv_state", self.conv_state, conv_shape),
                               ("recurrent_state", self.recurrent_state, recurrent_shape)):
            if x is not None and tuple(x.shape) != tuple(shape):
                raise ValueError(f"cache.{name} must have shape {tuple(shape)} for this layer and input, "
                                 f"got {tuple(x.shape)}")

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
        """Keep (or reorder, repeat) sequences by ``index`` ``[N']`` long (a tensor, or a list of ints
        from 0 to N - 1): beam search reordering. The index is read to the host once to check its range
        (an index past N would otherwise fail inside index_select, on a GPU as a device assert)."""
        if self.is_empty:
            return
        # Checked in its own dtype (lists and arrays too): cast to long first, [True, False] would read
        # as the sequence numbers 1, 0 and 2.5 as 2. An empty list is no dtype's: torch reads it as float.
        index = torch.as_tensor(index) if not (isinstance(index, (list, tuple)) and len(index) == 0) \
            else torch.empty(0, dtype=torch.long)
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise TypeError(f"index must hold integers (sequence numbers), got {index.dtype}")
        index = index.to(dtype=torch.long, device=self.recurrent_state.device)
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D [N'], got shape {tuple(index.shape)}")
        N = self.batch_size
        if index.numel() and not (0 <= int(index.min()) and int(index.max()) < N):
            raise IndexError(f"index must hold sequence numbers from 0 to N - 1 = {N - 1}, "
                             f"got {index.tolist()}")
        self.conv_state = self.conv_state.index_select(0, index)
        self.recurrent_state = self.recurrent_state.index_select(0, index)

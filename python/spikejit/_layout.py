"""Neuron calls in the memory order of their input.

The kernels read and write a sequence as T rows of N neurons in memory. A [T, *S] input whose
dimensions of S are permuted in memory, such as the channels-last activations of a convolution
([T, B, C, H, W] with C innermost), is still such rows: its view with S in memory order is
contiguous. A call on it runs on those views, and its results come back in the same memory order.
Copying it instead would move 8 more bytes per neuron-step than the kernels themselves (a read
and a write of the whole input), and a convolution downstream would convert the contiguous
results back to its own layout.
"""
from typing import List, Optional

import torch
from torch import Tensor


def memory_order(x: Tensor) -> Optional[List[int]]:
    """The dimension order [0, ...] in which the [T, *S] tensor x is contiguous, when x itself is
    not but that view is (time outermost, S permuted); else None: x is contiguous, or its layout is
    not one row per step (the call copies it)."""
    if x.dim() < 3 or x.layout is not torch.strided or x.is_contiguous():  # (the call rejects a sparse x)
        return None
    sizes, strides = x.shape, x.stride()
    # S by stride, largest first, ties in their order: an insertion sort, which torch.compile
    # traces with symbolic strides (sorted() with a key refuses them).
    order = [0]
    for d in range(1, x.dim()):
        at = len(order)
        while at > 1 and strides[order[at - 1]] < strides[d]:
            at -= 1
        order.insert(at, d)
    expected = 1  # the stride of each dimension, innermost first, were x.permute(order) contiguous
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def inverse(order: List[int]) -> List[int]:
    """The permutation that undoes `order`."""
    back = [0] * len(order)
    for position, dim in enumerate(order):
        back[dim] = position
    return back


def neuron_order(order: List[int]) -> List[int]:
    """The order of a [*S] tensor (a state, a per-neuron parameter) for the sequence order `order`."""
    return [d - 1 for d in order[1:]]

"""spikejit's CPU pool: the large CPU buffers of neuron calls, kept for reuse.

A CPU call's outputs, saved values and gradients of at least 1 MiB come from a pool that takes
their memory back when PyTorch frees them (the last tensor or view of one), so that the next call
of the same size finds its pages mapped: glibc would map such blocks afresh and unmap them on
free, and the page faults of every call were most of a large CPU training step. The pool keeps
at most `limit_bytes` of freed blocks (SPIKEJIT_CPU_POOL_MIB, default 1024; 0 keeps none); memory
beyond it goes back to the system.

    spikejit.cpu_pool.info()        # {'cached_bytes', 'cached_blocks', 'limit_bytes', 'allocations', 'reuses'}
    spikejit.cpu_pool.empty()       # frees what the pool keeps; returns the bytes freed
    spikejit.cpu_pool.set_limit(n)  # keep at most n bytes (frees what is beyond it now)

Its tensors are ordinary CPU tensors, except that their storage cannot be resized in place
(`Tensor.resize_` to a larger size raises), like any tensor from DLPack.
"""
from . import _core

__all__ = ["info", "empty", "set_limit"]


def info() -> dict:
    """{'cached_bytes', 'cached_blocks', 'limit_bytes', 'allocations', 'reuses'}: what the pool keeps
    now, its limit, and how many blocks it allocated and reused so far."""
    return _core.cpu_pool_info()


def empty() -> int:
    """Frees every block the pool keeps; returns their bytes."""
    return _core.cpu_pool_clear()


def set_limit(limit_bytes: int) -> None:
    """Keep at most `limit_bytes` of freed blocks (0: none); blocks beyond it are freed now."""
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int):
        raise TypeError(f"limit_bytes: expected an int >= 0, got {type(limit_bytes).__name__}")
    _core.cpu_pool_set_limit(limit_bytes)

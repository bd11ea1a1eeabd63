"""Programs referenced from the custom ops by an integer handle.

`torch.library` schemas cannot carry a C++ program, and Dynamo must not trace one, so every
program lives in this process-wide registry and the ops take its handle (a graph constant).
Lifetime (reference section 3.5): an entry lives while it has an owner (a module, a cache, a
copy of a module) or an active reference (a training forward whose backward has not run yet).
When both counts reach zero the entry is removed.

A handle is derived from what the program is (its canonical text, its backward steps with the
values they save, and the ops' result layout), not from the order of registration: compiled
graphs that torch.compile caches on disk hold handles as constants and are reused by other
processes, so a handle must mean the same program (and the same number of op results) in every
process and version. Registering an equal program again adds an owner to its entry.
"""
import hashlib
import threading
import weakref

from . import _core

_lock = threading.Lock()
_entries = {}
# Bumped when the ops' results for a program change (e.g. which saved values a forward returns).
# 3: packed outputs and the pack_spikes policy (bit-row outputs and saved values).
_RESULT_LAYOUT = "spikejit-op-results-3"


class _Entry:
    __slots__ = ("program", "owner_refs", "active_refs", "derived", "owned")

    def __init__(self, program):
        self.program = program
        self.owner_refs = 1
        self.active_refs = 0
        self.derived = {}  # facts computed from the program, cached with it
        self.owned = []  # handles of derived programs this entry holds an owner reference of


def _as_handle(handle) -> int:
    try:
        return int(handle)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"handle: expected an int, got {type(handle).__name__}") from None


def _handle_of(program: "_core.Program") -> int:
    """63 bits of a hash of the program and its saved values under both per-step policies
    (positive, an int64 in op schemas)."""
    text = "\n".join((_RESULT_LAYOUT, program.canonical(), program.backward_text(), repr(program.saved_inputs),
                      program.backward_text(True), repr(program.saved_plan(True))))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def register(program: "_core.Program") -> int:
    """Adds one owner reference to `program`'s entry (made if needed); returns its handle."""
    if not isinstance(program, _core.Program):
        raise TypeError(f"program: expected spikejit._core.Program, got {type(program).__name__}")
    handle = _handle_of(program)
    with _lock:
        entry = _entries.get(handle)
        if entry is None:
            _entries[handle] = _Entry(program)
        else:
            entry.owner_refs += 1
    return handle


def program(handle) -> "_core.Program":
    """The program of a live handle; RuntimeError if the handle is unknown or released."""
    handle = _as_handle(handle)
    entry = _entries.get(handle)
    if entry is None:
        raise RuntimeError(f"spikejit: kernel handle {handle} is not registered (released or never created)")
    return entry.program


def program_and_cache(handle):
    """(program, a dict for facts derived from it) of a live handle; the dict goes with the entry."""
    entry = _entries.get(_as_handle(handle))
    if entry is None:
        raise RuntimeError(f"spikejit: kernel handle {handle} is not registered (released or never created)")
    return entry.program, entry.derived


def derived_handle(handle, key: str, make) -> int:
    """The handle of the program make(program) derives from `handle`'s (the tangent neuron, say),
    made on first use; it lives as long as `handle`'s entry, which owns it."""
    program, derived = program_and_cache(handle)
    found = derived.get(key)
    if found is not None:
        return found
    made = make(program)  # outside the lock: it may take a while
    made_handle = _handle_of(made)
    with _lock:
        entry = _entries.get(_as_handle(handle))
        if entry is None:
            raise RuntimeError(f"spikejit: kernel handle {handle} is not registered (released or never created)")
        found = entry.derived.get(key)
        if found is not None:  # another thread made it meanwhile
            return found
        made_entry = _entries.get(made_handle)
        if made_entry is None:
            _entries[made_handle] = _Entry(made)
        else:
            made_entry.owner_refs += 1
        entry.owned.append(made_handle)
        entry.derived[key] = made_handle
    return made_handle


def _change(handle, owner_delta: int, active_delta: int) -> None:
    handle = _as_handle(handle)
    with _lock:
        entry = _entries.get(handle)
        if entry is None:
            if owner_delta > 0 or active_delta > 0:
                raise RuntimeError(f"spikejit: kernel handle {handle} is not registered")
            return
        entry.owner_refs = max(0, entry.owner_refs + owner_delta)
        entry.active_refs = max(0, entry.active_refs + active_delta)
        if entry.owner_refs or entry.active_refs:
            return
        del _entries[handle]
    for owned in entry.owned:  # after the lock: releasing takes it
        release_owner(owned)


def retain_owner(handle) -> None:
    _change(handle, 1, 0)


def release_owner(handle) -> None:
    _change(handle, -1, 0)


def retain_active(handle) -> None:
    _change(handle, 0, 1)


def release_active(handle) -> None:
    _change(handle, 0, -1)


def is_registered(handle) -> bool:
    return _as_handle(handle) in _entries


def info() -> dict:
    """Read-only totals: {'entries', 'owner_refs', 'active_refs'}."""
    with _lock:
        return {
            "entries": len(_entries),
            "owner_refs": sum(e.owner_refs for e in _entries.values()),
            "active_refs": sum(e.active_refs for e in _entries.values()),
        }


def handle_info(handle) -> dict:
    """{'owner_refs', 'active_refs'} of one live handle."""
    entry = _entries.get(_as_handle(handle))
    if entry is None:
        raise RuntimeError(f"spikejit: kernel handle {handle} is not registered")
    return {"owner_refs": entry.owner_refs, "active_refs": entry.active_refs}


def attach_owner(owner, handle) -> weakref.finalize:
    """Releases one owner reference of `handle` when `owner` is garbage-collected."""
    return weakref.finalize(owner, release_owner, handle)

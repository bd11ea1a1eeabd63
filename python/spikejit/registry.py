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
process and version. Registering an equal program again adds an owner to its entry. The entry
holds the program as its canonical text makes it (a shipped neuron built with its constants
folded may number its values otherwise), so that any process rebuilds it from the text alone.

A graph that names a handle can outlive every owner (a program exported with torch.export, run
after its model is gone or saved and loaded in another process). So when a graph is traced with
a handle (the ops' fake implementations run), its program's text is remembered: in this process
and in the disk cache (spikejit/runtime.h, remember_program). An unknown handle is looked up
there and registered again, for the rest of the process, when the text rebuilds to that handle.
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


def _rebuilt(program: "_core.Program") -> "_core.Program":
    """The program as its canonical text makes it: what an entry holds, registered or derived."""
    return _core.Program.from_text(program.canonical(), f"<program {program.name}>")


def register(program: "_core.Program") -> int:
    """Adds one owner reference to `program`'s entry (made if needed); returns its handle."""
    if not isinstance(program, _core.Program):
        raise TypeError(f"program: expected spikejit._core.Program, got {type(program).__name__}")
    program = _rebuilt(program)
    handle = _handle_of(program)
    with _lock:
        entry = _entries.get(handle)
        if entry is None:
            _entries[handle] = _Entry(program)
        else:
            entry.owner_refs += 1
    return handle


# handle -> canonical text of the programs that traced graphs name (remember), for this process.
_remembered = {}


def _store_name(handle: int) -> str:
    return f"{_RESULT_LAYOUT} handle {handle}"


def remember(handle) -> None:
    """Keeps the text of a live handle's program where an unknown handle is looked up (this
    process, the disk cache): a graph traced with the handle may run after its owners are gone
    or in another process. A disk cache that is off or unwritable keeps nothing (no error: the
    graph then runs where the program is registered, as before)."""
    handle = _as_handle(handle)
    if handle in _remembered:
        return
    named = program(handle)
    text = named.canonical()
    _core.remember_program(_store_name(handle), f"program {named.name} (spikejit handle {handle})", text)
    _remembered[handle] = text


def _recalled(handle: int):
    """The entry of a remembered program, registered again for the rest of the process, or None."""
    text = _remembered.get(handle) or _core.recall_program(_store_name(handle))
    if not text:
        return None
    try:
        recalled = _core.Program.from_text(text, "<remembered program>")
    except (_core.ParseError, _core.Error):  # (a text another version of spikejit wrote)
        return None
    if _handle_of(recalled) != handle:  # (another version's autodiff: not this handle's program)
        return None
    with _lock:
        entry = _entries.get(handle)
        if entry is None:
            entry = _entries[handle] = _Entry(recalled)  # its owner is the process: never released
        _remembered[handle] = text
    return entry


def _entry(handle) -> _Entry:
    """The entry of a live or remembered handle; RuntimeError for any other."""
    handle = _as_handle(handle)
    entry = _entries.get(handle) or _recalled(handle)
    if entry is None:
        raise RuntimeError(f"spikejit: kernel handle {handle} is not registered (released or never created, and "
                           f"no graph traced with it was seen by this process or this machine's kernel cache)")
    return entry


def program(handle) -> "_core.Program":
    """The program of a live or remembered handle; RuntimeError for any other."""
    return _entry(handle).program


def program_and_cache(handle):
    """(program, a dict for facts derived from it) of a live or remembered handle; the dict goes
    with the entry."""
    entry = _entry(handle)
    return entry.program, entry.derived


def derived_handle(handle, key: str, make) -> int:
    """The handle of the program make(program) derives from `handle`'s (the tangent neuron, say),
    made on first use; it lives as long as `handle`'s entry, which owns it."""
    program, derived = program_and_cache(handle)
    found = derived.get(key)
    if found is not None:
        return found
    made = _rebuilt(make(program))  # outside the lock: it may take a while
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
    if (owner_delta > 0 or active_delta > 0) and handle not in _entries:
        _recalled(handle)  # (before the lock, which it takes)
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

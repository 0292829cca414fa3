"""Compression: the only code that changes a slot's buffer state.

A compression is claimed on the slot's row (at most one per slot), run by a
dispatcher (inline or in a worker), and applied with a compare-and-swap:

1. **claim**: a token, ``pending_since`` and a lease on the slot's row, taken
   while the row is locked (by a save, an activation, the sweep or an operator).
2. **run**: a snapshot of the buffer up to its last sequence number, the
   summarizer called with no transaction open while the lease is renewed, and
   the output applied only if the buffer's ``version`` has not moved and the
   token still holds the claim. Messages saved meanwhile stay after the output.
3. **release**: on every way out, the claim is dropped and one log row written
   (when the database answers); what must propagate (``KeyboardInterrupt``,
   ``SystemExit``, cancellation) propagates after that.

Every entry point answers with a :class:`Result` whose ``outcome`` is one
:class:`~squad_memory.models.Outcome`.
"""

from __future__ import annotations

from squad_memory.compression.claims import (
    Claim,
    activate,
    claim,
    claim_locked,
    due,
    release,
    reset,
)
from squad_memory.compression.runner import Result, compress, run

__all__ = [
    "Claim",
    "Result",
    "activate",
    "claim",
    "claim_locked",
    "compress",
    "due",
    "release",
    "reset",
    "run",
]

"""Compression: the only code that changes a slot's buffer state. Every entry point answers with a
:class:`Result` whose ``outcome`` is one :class:`~squad_memory.models.Outcome`.

1. **claim**: a token, ``pending_since`` and a lease on the slot's locked row, taken after a save,
   by an activation, the sweep or an operator (at most one per slot).
2. **run**, by a dispatcher (inline, in a Celery worker, or through Django's Tasks framework): a
   snapshot of the buffer up to its last sequence number, the summarizer called with no transaction
   open while the lease is renewed, and the output applied only if the buffer's ``version`` has not
   moved and the token still holds the claim. Messages saved meanwhile stay after the output.
3. **release**: on every way out, the claim is dropped and one log row written (when the database
   answers); what must propagate (``KeyboardInterrupt``, ``SystemExit``, cancellation) propagates
   after that.
"""

from __future__ import annotations

from squad_memory.compression.claims import Claim, activate, claim, due, release, reset
from squad_memory.compression.dispatch import (
    DISPATCHERS,
    Dispatcher,
    InlineDispatcher,
    dispatcher_class,
    get_dispatcher,
)
from squad_memory.compression.policy import Policy
from squad_memory.compression.runner import Result, compress, run, snapshot
from squad_memory.compression.sweep import SweepReport, redispatch

__all__ = [
    "DISPATCHERS",
    "Claim",
    "Dispatcher",
    "InlineDispatcher",
    "Policy",
    "Result",
    "SweepReport",
    "activate",
    "claim",
    "compress",
    "dispatcher_class",
    "due",
    "get_dispatcher",
    "redispatch",
    "release",
    "reset",
    "run",
    "snapshot",
]

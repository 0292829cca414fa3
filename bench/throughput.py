"""Workload 5: messages per second with several writer processes on PostgreSQL.

Each writer is its own OS process (spawned, so ``django.setup`` runs in it) with
its own database connection. The processes are started once; for each round
(target, writer count) the first ``count`` of them start together on a barrier
and save message pairs for a fixed time, on different slots or all on one slot.
Batch saves have no role rule, so writers sharing a slot never skip each
other's messages. A barrier across all processes separates the rounds.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench import conversation

Round = tuple[str, int]
ABORTED = -1  # a writer's error instead of a round number


def _saver(target: str, key: tuple[str, str, str]) -> Callable[[int], int]:
    from bench.sm import FAST, BareOrm
    from squad_memory.storage import DjangoChatStorage, SummarizingChatStorage

    if target.startswith("bare ORM"):
        floor = BareOrm()
        floor._prefill(key, 0)

        def insert(i: int) -> int:
            floor.insert(key, "user", conversation.user_text(i))
            floor.insert(key, "assistant", conversation.answer_text(i))
            return 2

        return insert
    storage = SummarizingChatStorage(DjangoChatStorage(), FAST, 20, 2, mode="inline")

    def save(i: int) -> int:
        storage.save_chat_messages_sync(*key, [conversation.user(i), conversation.answer(i)])
        return 2

    return save


def writer(
    index: int,
    run: str,
    rounds: list[Round],
    barriers: list[Any],
    everyone: Any,
    duration: float,
    out: Any,
) -> None:
    """Take part in every round; on an error, break every barrier and report it."""
    try:
        _writer(index, run, rounds, barriers, everyone, duration, out)
    except threading.BrokenBarrierError:
        out.put((ABORTED, "another writer failed"))
    except Exception:
        for barrier in (*barriers, everyone):
            barrier.abort()
        out.put((ABORTED, f"writer {index}: {traceback.format_exc()}"))


def _writer(
    index: int,
    run: str,
    rounds: list[Round],
    barriers: list[Any],
    everyone: Any,
    duration: float,
    out: Any,
) -> None:
    import django

    django.setup()
    for number, ((target, count), barrier) in enumerate(zip(rounds, barriers, strict=True)):
        if index < count:
            session = "shared" if target.endswith("one-slot") else f"writer-{index}"
            save = _saver(target, (run, f"{number}-{target}-{count}-{session}", "agent"))
            save(0)  # slot and connection ready before the clock starts
            barrier.wait()
            saved, i, deadline = 0, 1, time.monotonic() + duration
            while time.monotonic() < deadline:
                saved += save(i)
                i += 1
            out.put((number, saved))
        everyone.wait()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    p = spec["params"]
    targets = spec.get("targets") or p["throughput_targets"]
    rounds: list[Round] = [(t, w) for t in targets for w in p["writers"]]
    ctx = mp.get_context("spawn")
    size = max(p["writers"])
    barriers = [ctx.Barrier(count) for _, count in rounds]
    everyone, out = ctx.Barrier(size), ctx.Queue()
    procs = [
        ctx.Process(
            target=writer, args=(i, spec["run"], rounds, barriers, everyone, p["duration_s"], out)
        )
        for i in range(size)
    ]
    for proc in procs:
        proc.start()
    totals = [0] * len(rounds)
    for _ in range(sum(count for _, count in rounds)):
        number, saved = out.get(timeout=600)
        if number == ABORTED:
            _fail(procs, out, str(saved))
        totals[number] += saved
    for proc in procs:
        proc.join(60)
    result: dict[str, Any] = {}
    for (target, count), total in zip(rounds, totals, strict=True):
        result.setdefault(target, {})[str(count)] = total / p["duration_s"]
    return {"W5": result}


def _fail(procs: list[Any], out: Any, first: str) -> None:
    """Stop the writers and raise the first real error any of them reported."""
    messages = [first]
    for proc in procs:
        proc.join(10)
    while not out.empty():
        messages.append(str(out.get()[1]))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
    real = [m for m in messages if m.startswith("writer ")] or messages
    raise RuntimeError(real[0])

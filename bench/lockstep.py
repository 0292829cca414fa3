"""Lockstep: a floor and the systems held against it take turns, block by block.

On a shared machine the CPU's speed drifts, by up to 2x within a second, more than
the difference being measured. Two processes measured seconds apart, even in
alternating rounds, can land in different phases. In a lockstep round the floor's
process and its systems' processes run side by side but never at once: each runs
one block of ``BLOCK`` turns, then waits at a gate while the next runs its block
(the order turns around every cycle). Block ``i`` of a system and block ``i`` of its
floor are then some milliseconds apart, in the same phase of the machine, and the
ratio to the floor is the median of the blocks' ratios (:func:`block_ratio`).

Each system still runs in a process of its own, with nothing else running while
its block is timed.

Child side: :func:`gate` (a no-op outside a lockstep round). Parent side: :func:`run`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Turns per block (the benchmark's ``block`` parameter): some milliseconds.
BLOCK = 20
#: The environment variable that hands a child its gate's two pipe ends ("read,write").
GATE_ENV = "BENCH_GATE"
_GO = b"g"


def active() -> bool:
    """Whether this process runs in a lockstep round."""
    return bool(os.environ.get(GATE_ENV))


def gate() -> None:
    """Tell the parent this process reached a gate, and wait until it is its turn again."""
    spec = os.environ.get(GATE_ENV)
    if not spec:
        return
    read, write = (int(fd) for fd in spec.split(","))
    os.write(write, _GO)
    if os.read(read, 1) != _GO:
        raise RuntimeError("the lockstep parent went away")


class _Child:
    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        to_read, self.to_write = os.pipe()
        self.from_read, from_write = os.pipe()
        env = dict(env, **{GATE_ENV: f"{to_read},{from_write}"})
        self.log_path = log
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            pass_fds=(to_read, from_write),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        os.close(to_read)
        os.close(from_write)

    def reached_gate(self) -> bool:
        """Wait until the child is at a gate (True) or has finished (False)."""
        return os.read(self.from_read, 1) == _GO

    def go(self) -> bool:
        """Let the child run to its next gate; False when it finished instead."""
        try:
            os.write(self.to_write, _GO)
        except BrokenPipeError:
            return False
        return self.reached_gate()

    def finish(self) -> int:
        for fd in (self.to_write, self.from_read):
            os.close(fd)
        code = self.proc.wait()
        self.log.close()
        return code


def run(commands: Sequence[tuple[Sequence[str], dict[str, str], Path]], cwd: Path) -> list[int]:
    """Run ``(argv, env, log)`` commands in lockstep; their exit codes.

    Every child starts at once and runs to its first gate; from then on one runs at a
    time, from one gate to its next, in turn (reversed every cycle), until all finish.
    """
    children = [_Child(argv, env, cwd, log) for argv, env, log in commands]
    try:
        waiting = [child for child in children if child.reached_gate()]
        cycle = 0
        while waiting:
            order = waiting if cycle % 2 == 0 else waiting[::-1]
            done = {id(child) for child in order if not child.go()}
            waiting = [child for child in waiting if id(child) not in done]
            cycle += 1
    finally:  # a child still at a gate reads the end of its pipe, and stops
        codes = [child.finish() for child in children]
    return codes


def block_ratio(mine: Any, floor: Any) -> float | None:
    """The median, over lockstep rounds and blocks, of each block's ratio to the floor's
    block run beside it; ``mine`` and ``floor`` are W1 figures at one N, merged over
    rounds (``blocks``: per round, its block medians or None outside lockstep)."""
    ratios = [
        a / b
        for ours, theirs in zip(mine.get("blocks") or [], floor.get("blocks") or [], strict=False)
        if ours and theirs
        for a, b in zip(ours, theirs, strict=False)
        if b > 0
    ]
    return float(statistics.median(ratios)) if ratios else None


def blocks_of(totals: list[float], block: int = BLOCK) -> list[float]:
    """The medians of consecutive blocks of ``block`` turns (a last partial one dropped)."""
    return [
        statistics.median(totals[i : i + block]) for i in range(0, len(totals) - block + 1, block)
    ]

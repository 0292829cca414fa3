"""Lockstep: a system and the floors it is held against take turns, block by block.

On a shared machine the CPU's speed drifts, by up to 2x within a second, more than
the difference being measured. Two processes measured seconds apart, even in
alternating rounds, can land in different phases. In a lockstep round the floor's
process and the system's run side by side but never at once: each runs one block of
``block`` turns, then waits at a gate while the others run theirs; the order turns
around every cycle (floor, system | system, floor | ...). Block ``i`` of the
system and block ``i`` of the floor are then milliseconds apart, in the same phase of
the machine, and the ratio to the floor is the median of the blocks' ratios
(:func:`block_ratios`).

Each system still runs in a process of its own, with nothing else running while its
block is timed: a process settles its own background work (a queued compression)
before it waits at a gate.

Child side: :func:`gate` (a no-op outside a lockstep round). Parent side: :func:`run`.
"""

from __future__ import annotations

import os
import select
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Turns per block (the benchmark's ``block`` parameter): some milliseconds.
BLOCK = 20
#: The environment variable that hands a child its gate's two pipe ends ("read,write").
GATE_ENV = "BENCH_GATE"
#: Seconds a child may run from one gate to the next before the round is given up.
SEGMENT_TIMEOUT_S = 600.0
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
        self.log = log.open("wb")
        try:
            self.proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                pass_fds=(to_read, from_write),
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
        except BaseException:
            for fd in (self.to_write, self.from_read):
                os.close(fd)
            self.log.close()
            raise
        finally:
            os.close(to_read)
            os.close(from_write)

    def reached_gate(self, timeout: float) -> bool:
        """Wait until the child is at a gate (True) or has finished (False)."""
        ready, _, _ = select.select([self.from_read], [], [], timeout)
        if not ready:
            raise TimeoutError(f"a lockstep segment ran over {timeout:.0f} s: {self.proc.args}")
        return os.read(self.from_read, 1) == _GO

    def go(self, timeout: float) -> bool:
        """Let the child run to its next gate; False when it finished instead."""
        try:
            os.write(self.to_write, _GO)
        except BrokenPipeError:
            return False
        return self.reached_gate(timeout)

    def failed(self) -> bool:
        """Whether the child, which finished, exited with an error."""
        return self.proc.wait() != 0

    def finish(self, kill: bool) -> int:
        """Close its gate (a child still waiting at it stops) and wait for it."""
        for fd in (self.to_write, self.from_read):
            os.close(fd)
        if kill and self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self.log.close()
        return code


def run(
    commands: Sequence[tuple[Sequence[str], dict[str, str], Path]],
    cwd: Path,
    timeout: float = SEGMENT_TIMEOUT_S,
) -> list[int]:
    """Run ``(argv, env, log)`` commands in lockstep; their exit codes.

    Every child starts at once and runs to its first gate; from then on one runs at a
    time, from one gate to its next, in turn (the order reversed every cycle), until
    all finish. A child that fails ends the round: the others stop at their next gate.
    A segment running over ``timeout`` seconds kills the round (TimeoutError).
    """
    children: list[_Child] = []
    ended = False
    try:
        for argv, env, log in commands:
            children.append(_Child(argv, env, cwd, log))
        waiting = [child for child in children if child.reached_gate(timeout)]
        cycle = 0
        while waiting:
            if any(child.failed() for child in children if child not in waiting):
                break  # the round is lost: the others stop at their gates
            order = waiting if cycle % 2 == 0 else waiting[::-1]
            done = [child for child in order if not child.go(timeout)]
            waiting = [child for child in waiting if child not in done]
            cycle += 1
        ended = True
    finally:  # a timeout or an error here: the children are killed
        codes = [child.finish(kill=not ended) for child in children]
    return codes


def block_ratios(mine: dict[str, Any], floor: dict[str, Any]) -> list[float]:
    """Each block's ratio to the floor's block run beside it, from the W1 figures at one N
    of one lockstep round of a system and its floor; none when the blocks do not pair:
    outside lockstep, a time cap reached, or not as many blocks on each side."""
    ours, theirs = mine.get("blocks"), floor.get("blocks")
    if not ours or not theirs or len(ours) != len(theirs):
        return []
    if mine.get("capped") or floor.get("capped"):
        return []
    return [a / b for a, b in zip(ours, theirs, strict=True) if b > 0]

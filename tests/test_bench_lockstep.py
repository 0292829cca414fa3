"""The benchmark's lockstep: processes side by side, one running at a time, in turn."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from bench import lockstep

#: The children's environment: the repository importable, nothing else inherited.
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PATH": "/usr/bin:/bin"}

CHILD = """
import sys, time
from bench import lockstep
name, log, segments = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(segments):
    lockstep.gate()
    with open(log, "a") as f:
        f.write(f"{name} start {i} {time.monotonic()}\\n")
    time.sleep(0.01)  # the other child would write meanwhile if it could run
    with open(log, "a") as f:
        f.write(f"{name} end {i} {time.monotonic()}\\n")
"""


def _run(tmp_path: Path, segments: dict[str, int]) -> tuple[list[int], list[list[str]]]:
    log = tmp_path / "events.log"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    commands = [
        ([sys.executable, str(script), name, str(log), str(count)], ENV, tmp_path / f"{name}.log")
        for name, count in segments.items()
    ]
    codes = lockstep.run(commands, tmp_path)
    return codes, [line.split() for line in log.read_text().splitlines()]


def test_children_run_one_at_a_time_block_by_block_in_turn(tmp_path: Path) -> None:
    codes, events = _run(tmp_path, {"floor": 4, "system": 4})
    assert codes == [0, 0]
    # Never two at once: every start is followed by the same child's end.
    for start, end in zip(events[::2], events[1::2], strict=True):
        assert start[1] == "start" and end[1] == "end"
        assert end[0] == start[0] and end[2] == start[2]
    order = [e[0] for e in events[::2]]
    # Block i of each runs beside the other's block i; the order turns around every cycle.
    assert order == ["floor", "system", "system", "floor", "floor", "system", "system", "floor"]
    assert [int(e[2]) for e in events[::2]] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_child_that_finishes_early_leaves_the_others_running(tmp_path: Path) -> None:
    codes, events = _run(tmp_path, {"floor": 1, "system": 3})
    assert codes == [0, 0]
    assert [(e[0], int(e[2])) for e in events[::2]] == [
        ("floor", 0),
        ("system", 0),
        ("system", 1),
        ("system", 2),
    ]


def _commands(
    tmp_path: Path, scripts: dict[str, str]
) -> list[tuple[list[str], dict[str, str], Path]]:
    commands = []
    for name, text in scripts.items():
        (tmp_path / f"{name}.py").write_text(text)
        commands.append(
            ([sys.executable, str(tmp_path / f"{name}.py")], ENV, tmp_path / f"{name}.log")
        )
    return commands


GATES = "from bench import lockstep\nfor _ in range({n}):\n    lockstep.gate()\n"


def test_a_child_failing_between_gates_ends_the_round(tmp_path: Path) -> None:
    started = time.monotonic()
    codes = lockstep.run(
        _commands(
            tmp_path,
            {
                "bad": GATES.format(n=2) + "raise SystemExit(3)\n",
                "good": GATES.format(n=1000) + "open('finished', 'w').close()\n",
            },
        ),
        tmp_path,
    )
    assert codes[0] == 3 and codes[1] != 0  # the other stopped at its next gate
    assert not (tmp_path / "finished").exists()
    assert time.monotonic() - started < 30


def test_a_segment_over_the_timeout_kills_the_round(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="lockstep segment"):
        lockstep.run(
            _commands(
                tmp_path,
                {
                    "floor": GATES.format(n=3),
                    "stuck": GATES.format(n=1) + "import time\ntime.sleep(60)\n",
                },
            ),
            tmp_path,
            timeout=1.0,
        )
    assert time.monotonic() - started < 30  # killed, not waited for


def test_block_ratios_pair_blocks_of_one_lockstep_round() -> None:
    mine = {"blocks": [2.0, 3.0, 9.0], "capped": False}
    floor = {"blocks": [1.0, 1.5, 3.0], "capped": False}
    assert lockstep.block_ratios(mine, floor) == [2.0, 2.0, 3.0]
    assert lockstep.block_ratios({"blocks": None}, floor) == []  # not in lockstep
    assert lockstep.block_ratios({"blocks": [2.0]}, floor) == []  # blocks that do not pair
    assert lockstep.block_ratios(dict(mine, capped=True), floor) == []  # a time cap reached

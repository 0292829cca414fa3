"""The benchmark's lockstep: processes side by side, one running at a time, in turn."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import lockstep

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
    root = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    commands = [
        ([sys.executable, str(script), name, str(log), str(count)], env, tmp_path / f"{name}.log")
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


def test_a_failing_child_stops_the_round_without_hanging(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import sys; sys.exit(3)\n")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    root = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    log = tmp_path / "events.log"
    codes = lockstep.run(
        [
            ([sys.executable, str(tmp_path / "bad.py")], env, tmp_path / "bad.log"),
            ([sys.executable, str(script), "system", str(log), "2"], env, tmp_path / "s.log"),
        ],
        tmp_path,
    )
    assert codes == [3, 0]


def test_block_ratio_pairs_blocks_of_lockstep_rounds_only() -> None:
    mine = {"blocks": [None, [2.0, 3.0, 9.0], [4.0]]}
    floor = {"blocks": [[1.0], [1.0, 1.0, 1.0], [2.0]]}
    assert lockstep.block_ratio(mine, floor) == 2.5  # median of 2, 3, 9, 2
    assert lockstep.block_ratio({"blocks": [None]}, {"blocks": [[1.0]]}) is None
    assert lockstep.blocks_of([1, 2, 3, 10, 20, 30, 7], 3) == [2, 20]

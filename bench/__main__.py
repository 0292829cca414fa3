"""``python -m bench [--quick] [--only W1,W3] [--out DIR]``: run the benchmarks, write the results.

A full run writes ``bench/results/`` (README.md, results.json, PNG plots); a quick
run writes to ``bench/.work/quick`` unless ``--out`` says otherwise.
``python -m bench --turn-profile [--cprofile] [--quick]`` prints where one turn's time goes
(:mod:`bench.turn_profile`) and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from bench import machine, ratios
from bench.config import FULL, QUICK, WORKLOADS
from bench.runner import Runner

HERE = Path(__file__).resolve().parent


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run (~1 min)")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="workloads, e.g. W1,W3")
    parser.add_argument("--out", type=Path, help="results directory")
    parser.add_argument("--work", type=Path, default=HERE / ".work", help="scratch directory")
    parser.add_argument(
        "--turn-profile",
        action="store_true",
        help="only print the median ms of each step of a turn, squad_memory beside "
        "Django's floor in lockstep (under a minute)",
    )
    parser.add_argument(
        "--cprofile", action="store_true", help="with --turn-profile: add a cProfile of a turn"
    )
    args = parser.parse_args(argv)
    args.workloads = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    unknown = args.workloads - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose among {', '.join(WORKLOADS)}")
    if args.out is None:
        args.out = args.work / "quick" if args.quick else HERE / "results"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    if args.turn_profile:
        return turn_profile(args)
    runner = Runner(QUICK if args.quick else FULL, args.workloads, args.work.resolve(), args.quick)
    started = time.perf_counter()
    print("Preparing databases and services", flush=True)
    runner.prepare()
    runner.results["machine"] = machine.describe(runner.databases.get("postgresql"))
    runner.results["params"] = runner.params
    if args.workloads & {"W1", "W2", "W3"}:
        runner.systems()
        ratios.show(runner.results)
    if "W4" in args.workloads:
        runner.queries()
    if "W5" in args.workloads:
        runner.throughput()
    if "W6" in args.workloads:
        runner.memory()
    runner.results.update(
        command=" ".join(
            ["python -m bench", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
        ),
        quick=args.quick,
        workloads=sorted(args.workloads),
        params=runner.params,
        elapsed_s=time.perf_counter() - started,
        load_average_end=os.getloadavg(),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(runner.results, indent=1))
    from bench import report, targets

    report.write(runner.results, args.out)
    for row in targets.evaluate(runner.results):
        verdict = "-" if row["met"] is None else ("met" if row["met"] else "MISSED")
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        print(f"  {verdict:<6} {ratio:>7}  {row['target']} [{row['subject']}]", flush=True)
    print(f"Done in {runner.results['elapsed_s']:.0f} s; results in {args.out}", flush=True)
    return 0


def turn_profile(args: argparse.Namespace) -> int:
    """``--turn-profile``: the step table (and with ``--cprofile``, the profiles)."""
    from bench import turn_profile as tp

    started = time.perf_counter()
    params = tp.QUICK if args.quick else tp.PARAMS
    runner = Runner(params, {"W1"}, (args.work / "profile").resolve(), quick=True)
    runner.prepare()
    print("\n".join(tp.lines(tp.run(runner))), flush=True)
    for database in runner.databases:
        found = runner.step({"kind": "caches", "system": "sm"}, database)
        print("\n".join(tp.cache_lines(database, found)), flush=True)
    if args.cprofile:
        for database in runner.databases:
            found = runner.step({"kind": "cprofile", "system": "sm"}, database)
            print("\n".join(tp.profile_lines(database, found)), flush=True)
    print(f"Done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

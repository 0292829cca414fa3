"""One benchmark step in a fresh process: ``python -m bench.child SPEC.json``.

The parent (:mod:`bench.__main__`) sets ``DATABASE_URL`` and the summarizer sleeps
in the environment, so every step starts from a clean process on one database.
The step writes its result as JSON to ``spec["out"]``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import django


def make_system(name: str, spec: dict[str, Any], slow: bool = False) -> Any:
    from bench import floor, rivals, sm

    work = Path(spec["work"])
    summarizer = sm.SLOW if slow else sm.FAST
    factories = {
        "sm-inline": lambda: sm.SquadMemory("inline", summarizer),
        "sm-celery": lambda: sm.SquadMemory("celery", summarizer),
        "floor-django": floor.DjangoFloor,
        "floor-driver": floor.DriverFloor,
        "orm": sm.BareOrm,
        "as-inmemory": lambda: rivals.AgentSquadInMemory(slow),
        "as-libsql": lambda: rivals.AgentSquadLibsql(work / f"libsql-{spec['run']}.db", slow),
        "langchain": lambda: rivals.LangChainSummaryBuffer(work / f"langchain-{spec['run']}.db"),
    }
    return factories[name]()


async def run_system(spec: dict[str, Any]) -> dict[str, Any]:
    """W1 and W2 (history growth) and W3 (latency) for one system."""
    from bench import lockstep, workloads

    result: dict[str, Any] = {}
    p = spec["params"]
    if "W1" in spec["workloads"] or "W2" in spec["workloads"]:
        system = make_system(spec["system"], spec)
        await system.start()
        result["meta"] = {"label": system.label, "database": system.database}
        result.update(
            await workloads.history_growth(
                system,
                spec["run"],
                p["sizes"],
                p["turns"],
                p["cap_s"],
                p["fetches"],
                p.get("block", lockstep.BLOCK),
            )
        )
        await system.close()
    if "W3" in spec["workloads"]:
        system = make_system(spec["system"], spec, slow=True)
        await system.start()
        result.setdefault("meta", {"label": system.label, "database": system.database})
        result["W3"] = await workloads.latency(
            system, spec["run"], p["latency_turns"], p["think_s"]
        )
        await system.close()
    return result


def run(spec: dict[str, Any]) -> dict[str, Any]:
    kind = spec["kind"]
    if kind == "system":
        return asyncio.run(run_system(spec))
    if kind == "queries":
        from bench import queries

        p = spec["params"]
        return {
            "W4": queries.query_counts(spec["run"], tuple(p["query_sizes"])),
            "sync": queries.sync_saves(spec["run"], p["sizes"][-1], p["sync_saves"]),
        }
    if kind == "throughput":
        from bench import throughput

        return throughput.run(spec)
    if kind == "cprofile":
        from bench import turn_profile

        return turn_profile.cprofile(spec["run"], spec["params"]["profile_turns"])
    if kind == "caches":
        from bench import turn_profile

        return turn_profile.caches(spec["run"], spec["params"]["profile_turns"])
    if kind in ("memory-fill", "memory"):
        from bench import memory

        return memory.run(spec)
    raise ValueError(f"unknown step kind {kind!r}")


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    django.setup()
    result = run(spec)
    Path(spec["out"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()

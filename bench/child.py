"""One benchmark step in a fresh process: ``python -m bench.child SPEC.json``.

The parent (:mod:`bench.__main__`) sets ``DATABASE_URL`` and the summarizer's sleeps in
the environment; the step writes its result as JSON to ``spec["out"]``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import django


def contenders(spec: dict[str, Any], slow: bool = False) -> dict[str, Any]:
    """The systems of this database, by id."""
    from django.db import connection

    from bench import systems as s

    db, work = connection.vendor, Path(spec["work"])
    summarizer = "bench.systems.summarize_slow" if slow else "bench.systems.summarize"
    found: dict[str, Any] = {f"sm-inline-{db}": s.SquadMemory("inline", summarizer)}
    if db == "postgresql" and spec["celery"]:
        found["sm-celery-postgresql"] = s.SquadMemory("celery", summarizer)
    if db == "sqlite":
        found["as-inmemory"] = s.AgentSquadInMemory(slow)
    if not slow:
        found[f"floor-django-{db}"] = s.DjangoFloor()
        found[f"floor-contract-{db}"] = s.ContractFloor()
        if db == "sqlite":
            found["as-libsql"] = s.AgentSquadLibsql(work / "libsql.db")
            found["langchain"] = s.LangChain(work / "langchain.db")
    return found


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    from asgiref.sync import sync_to_async

    from bench import workloads

    p, run_id, c = spec["params"], spec["run"], spec.get("concurrency")
    if c:  # W4: one run, at each count of conversations
        return {
            str(k): await workloads.conversations(
                c["mode"], c["slow"], k, c["turns"], run_id, tuple(c["trigger"])
            )
            for k in p["counts"]
        }
    slow = contenders(spec, slow=True)  # W1, W2, W3 of this database
    return {
        "systems": await workloads.growth(contenders(spec), run_id, p),
        "W2": {
            sid: await workloads.slow_turns(system, run_id, p["slow_turns"])
            for sid, system in slow.items()
        },
        "W3": await sync_to_async(workloads.statements)(run_id, p["statements_n"]),
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    django.setup()
    Path(spec["out"]).write_text(json.dumps(asyncio.run(run(spec))))


if __name__ == "__main__":
    main()

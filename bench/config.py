"""Sizes of a full run and of a ``--quick`` smoke run."""

from __future__ import annotations

from typing import Any

#: every summarizing store: compress past TRIGGER_AT pairs, keep the last KEEP_LAST pairs
TRIGGER_AT = 20
KEEP_LAST = 2

FULL: dict[str, Any] = {
    "sizes": [100, 1_000, 10_000],  # W1, W2: stored history N
    "turns": 200,  # W1: timed turns per N (after one warm-up turn)
    "floor_rounds": 5,  # W1 rounds of the floors and the systems held against them
    "block": 20,  # turns per lockstep block (bench.lockstep)
    "cap_s": 20.0,  # W1, W2: time cap per system and N (LangChain, libsql at N = 10,000)
    "fetches": 50,  # W2: fetch_chat calls per N
    "latency_turns": 200,  # W3
    "slow_sleep": 1.0,  # W3: summarizer sleep (s)
    "think_s": 0.05,  # W3: untimed pause between turns (the agent answering)
    "query_sizes": [10, 10_000],  # W4
    "sync_saves": 200,  # save through the wrapper against a bare insert
    "writers": [1, 2, 4, 8],  # W5
    "duration_s": 3.0,  # W5: seconds per measurement
    "slots": 10_000,  # W6
    "throughput_targets": [  # W5
        "squad_memory different slots",
        "squad_memory one-slot",
        "bare ORM different slots",
    ],
}

QUICK: dict[str, Any] = {
    "sizes": [100, 300],
    "turns": 5,
    "floor_rounds": 2,
    "block": 2,  # turns per lockstep block
    "cap_s": 3.0,
    "fetches": 5,
    "latency_turns": 20,
    "slow_sleep": 0.1,
    "think_s": 0.0,
    "query_sizes": [10, 100],
    "sync_saves": 10,
    "writers": [1, 2],
    "duration_s": 0.5,
    "slots": 30,
    "throughput_targets": ["squad_memory different slots", "squad_memory one-slot"],
}

WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6")

#: (id, child system, database, workloads it takes part in)
SYSTEMS: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("sm-inline-sqlite", "sm-inline", "sqlite", ("W1", "W2", "W3")),
    ("sm-inline-postgresql", "sm-inline", "postgresql", ("W1", "W2", "W3")),
    ("sm-celery-postgresql", "sm-celery", "postgresql", ("W1", "W2", "W3")),
    ("floor-django-sqlite", "floor-django", "sqlite", ("W1", "W2")),
    ("floor-django-postgresql", "floor-django", "postgresql", ("W1", "W2")),
    ("floor-driver-sqlite", "floor-driver", "sqlite", ("W1", "W2")),
    ("floor-driver-postgresql", "floor-driver", "postgresql", ("W1", "W2")),
    ("orm-sqlite", "orm", "sqlite", ("W1", "W2")),
    ("orm-postgresql", "orm", "postgresql", ("W1", "W2")),
    ("as-inmemory", "as-inmemory", "none", ("W1", "W2", "W3")),
    ("as-libsql", "as-libsql", "none", ("W1", "W2")),
    ("langchain", "langchain", "none", ("W1", "W2")),
]

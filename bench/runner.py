"""Runs the benchmark steps, each in a fresh process, and gathers their results."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import services
from bench.config import SYSTEMS

SQLITE_NAME = "bench.sqlite3"


class Runner:
    """Holds the run's settings, the databases available, and the results so far."""

    def __init__(
        self, params: dict[str, Any], workloads: set[str], work: Path, quick: bool
    ) -> None:
        self.params, self.workloads, self.work, self.quick = params, workloads, work, quick
        self.run_id = f"r{int(time.time())}"
        self.results: dict[str, Any] = {"systems": {}, "notes": [], "skipped": []}
        self.databases: dict[str, str] = {"sqlite": f"sqlite:///{work / SQLITE_NAME}"}

    # -- environment -------------------------------------------------------------------
    def env(self, database: str, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="bench.settings",
            DATABASE_URL=self.databases.get(database, self.databases["sqlite"]),
            DJANGO_DEBUG="0",
            # The demo settings outside DEBUG need a key of their own; one for the run.
            DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
            DJANGO_SECURE_SSL_REDIRECT="0",
            SQUAD_MEMORY_VAR_DIR=str(self.work),
            CELERY_BROKER_URL=services.REDIS_URL,
            BENCH_SUMMARIZER_SLEEP="0",
            BENCH_SLOW_SLEEP=str(self.params.get("slow_sleep", 1.0)),
            PYTHONWARNINGS="ignore",
        )
        env.update(extra)
        return env

    def prepare(self) -> None:
        """Fresh SQLite file; the PostgreSQL database if reachable; migrations on both."""
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / SQLITE_NAME).unlink(missing_ok=True)
        problem = services.postgres()
        if problem:
            self.skip("postgresql", problem)
        else:
            self.databases["postgresql"] = services.PG_URL
        services.migrate(*[self.env(database) for database in self.databases])
        if "postgresql" in self.databases and not self.quick:
            services.truncate()
        self.broker_problem = services.redis() or services.celery_app()
        if self.broker_problem:
            self.skip("celery", self.broker_problem)

    def skip(self, what: str, reason: str) -> None:
        self.results["skipped"].append({"what": what, "reason": reason})
        print(f"  skipped {what}: {reason}", flush=True)

    # -- steps -------------------------------------------------------------------------
    def _spec(self, spec: dict[str, Any]) -> tuple[str, dict[str, Any], Path]:
        """The step's tag, its full spec, and the spec's file (written)."""
        tag = f"{spec['kind']}-{spec.get('system', '')}-{spec.get('database', '')}"
        spec = dict(spec, work=str(self.work), params=self.params)
        spec.setdefault("run", f"{self.run_id}-{tag}")
        spec["out"] = str(self.work / f"{tag}.out.json")
        spec_path = self.work / f"{tag}.spec.json"
        spec_path.write_text(json.dumps(spec))
        return tag, spec, spec_path

    def step(self, spec: dict[str, Any], database: str, **env: str) -> dict[str, Any]:
        """Run one step in a fresh process (``env`` added to its environment); its JSON result."""
        tag, spec, spec_path = self._spec(dict(spec, database=database))
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "bench.child", str(spec_path)],
            cwd=services.ROOT,
            env=self.env(database, **env),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"benchmark step {tag} failed:\n{proc.stderr[-4000:]}")
        print(f"  {tag}: {time.perf_counter() - started:.1f} s", flush=True)
        result: dict[str, Any] = json.loads(Path(spec["out"]).read_text())
        return result

    def lockstep(self, specs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
        """Run steps ``(spec, database)`` side by side in lockstep (:mod:`bench.lockstep`);
        their JSON results."""
        from bench import lockstep

        prepared = [(self._spec(dict(spec, database=db)), db) for spec, db in specs]
        commands = [
            (
                [sys.executable, "-m", "bench.child", str(path)],
                self.env(db),
                self.work / f"{tag}.log",
            )
            for (tag, _, path), db in prepared
        ]
        started = time.perf_counter()
        codes = lockstep.run(commands, services.ROOT)
        tags = ", ".join(tag for (tag, _, _), _ in prepared)
        for ((tag, _, _), _), (_, _, log), code in zip(prepared, commands, codes, strict=True):
            if code != 0:
                text = log.read_text(errors="replace")[-4000:]
                raise RuntimeError(f"benchmark step {tag} failed (in lockstep):\n{text}")
        print(f"  lockstep {tags}: {time.perf_counter() - started:.1f} s", flush=True)
        return [json.loads(Path(spec["out"]).read_text()) for (_, spec, _), _ in prepared]

    def systems(self) -> None:
        """W1, W2 and W3 for every system that takes part."""
        for sid, child, database, takes in SYSTEMS:
            workloads = [w for w in takes if w in self.workloads]
            if not workloads or not self.available(sid, database):
                continue
            spec = {"kind": "system", "system": child, "workloads": workloads}
            if child == "sm-celery":
                log = self.work / "celery-worker.log"
                with services.Worker(self.env(database), log):
                    self.results["systems"][sid] = self.step(spec, database)
            else:
                self.results["systems"][sid] = self.step(spec, database)
        if "W1" in self.workloads and self.params.get("floor_rounds", 1) > 1:
            self.floor_rounds(self.params["floor_rounds"])

    def floor_rounds(self, count: int) -> None:
        """W1 and W2 of the floors and the systems held against them, ``count`` rounds in
        all: the pass above, then each group of :data:`bench.rounds.ROUND_GROUPS` in
        lockstep; merged (:mod:`bench.rounds`), with each system's block ratios to every
        floor of its group (:mod:`bench.lockstep`), ``block_ratios``: ``{floor: [...]}``."""
        from bench.lockstep import block_ratios
        from bench.rounds import ROUND_GROUPS, is_floor, merge, merge_w2

        done = self.results["systems"]
        groups = [g for g in ROUND_GROUPS if all("W1" in done.get(sid, {}) for sid in g)]
        runs = {sid: [done[sid]] for group in groups for sid in group}
        ratios: dict[str, dict[str, dict[str, list[float]]]] = {}
        children = {sid: (child, database) for sid, child, database, _ in SYSTEMS}
        for number in range(2, count + 1):
            for group in groups:
                found = self._group_round(group, number, children)
                for sid, mine in zip(group, found, strict=True):
                    runs[sid].append(mine)
                    for floor, beside in zip(group, found, strict=True):
                        if floor == sid or not is_floor(floor):
                            continue
                        per = ratios.setdefault(sid, {})
                        for n, figures in mine["W1"].items():
                            paired = block_ratios(figures, beside["W1"].get(n, {}))
                            per.setdefault(n, {}).setdefault(floor, []).extend(paired)
        for sid, found_runs in runs.items():
            done[sid]["W1"] = merge([run["W1"] for run in found_runs])
            if all("W2" in run for run in found_runs):
                done[sid]["W2"] = merge_w2([run["W2"] for run in found_runs])
        for sid, per_n in ratios.items():
            for n, values in per_n.items():
                done[sid]["W1"][n]["block_ratios"] = values

    def _group_round(
        self, group: tuple[str, ...], number: int, children: dict[str, tuple[str, str]]
    ) -> list[dict[str, Any]]:
        """One lockstep round of a group (W1 and W2); each member's result, in order."""
        from bench.rounds import is_floor

        system = next(sid for sid in group if not is_floor(sid))
        specs = []
        for one in group:
            child, database = children[one]
            spec = {"kind": "system", "system": child, "workloads": ["W1", "W2"]}
            spec["run"] = f"{self.run_id}-round{number}-{system}-{one}"
            specs.append((spec, database))
        child, database = children[system]
        if child == "sm-celery":
            with services.Worker(self.env(database), self.work / "celery-worker.log"):
                return self.lockstep(specs)
        return self.lockstep(specs)

    def available(self, sid: str, database: str) -> bool:
        if database not in ("none", "sqlite") and database not in self.databases:
            return False
        return not (sid.startswith("sm-celery") and self.broker_problem)

    def queries(self) -> None:
        for database in ("sqlite", "postgresql"):
            if database in self.databases:
                out = self.step({"kind": "queries", "system": "sm"}, database)
                self.results.setdefault("W4", {})[database] = out["W4"]
                self.results.setdefault("sync", {})[database] = out["sync"]

    def throughput(self) -> None:
        if "postgresql" not in self.databases:
            self.skip("W5", "multi-writer throughput runs on PostgreSQL only")
            return
        self.results["W5"] = self.step({"kind": "throughput", "system": "sm"}, "postgresql")["W5"]
        self.throughput_pgbouncer()

    def throughput_pgbouncer(self) -> None:
        """W5 on different slots again, every writer connected through PgBouncer."""
        from bench import pgbouncer
        from bench.targets import PGBOUNCER_TARGET

        if pgbouncer.binary() is None:
            self.skip(
                "W5 through PgBouncer", "pgbouncer is not installed (apt-get install -y pgbouncer)"
            )
            return
        spec = {"kind": "throughput", "system": "sm-pgbouncer", "targets": [PGBOUNCER_TARGET]}
        try:
            with pgbouncer.PgBouncer(services.PG_URL) as bouncer:
                out = self.step(spec, "postgresql", DATABASE_URL=bouncer.url, BENCH_PGBOUNCER="1")
        except (pgbouncer.PgBouncerError, RuntimeError) as exc:
            self.results["W5_pgbouncer"] = {"error": str(exc)[-2000:]}
            print(f"  W5 through PgBouncer failed: {str(exc)[-2000:]}", flush=True)
            return
        self.results["W5"].update(out["W5"])
        self.results["W5_pgbouncer"] = {"error": None, "pool_mode": "transaction"}

    def memory(self) -> None:
        database = "postgresql" if "postgresql" in self.databases else "sqlite"
        run = f"{self.run_id}-memory"  # the measuring step reads the slots the fill step wrote
        fill = self.step({"kind": "memory-fill", "system": "sm", "run": run}, database)
        sm = self.step({"kind": "memory", "system": "sm", "run": run}, database)
        agent_squad = self.step({"kind": "memory", "system": "as-inmemory"}, "sqlite")
        self.results["W6"] = {
            "database": database,
            "fill": fill,
            "squad_memory": sm,
            "agent_squad": agent_squad,
        }

"""``python -m bench scale``: the admin's pages and the API's calls on a big database.

**The databases.** :func:`load` fills a migrated PostgreSQL database by COPY, in the shape
squad_memory's saves leave it (the default settings: the offline summarizer compresses a
slot past 20 pairs): slots with their counters, raw messages in the order many
conversations write them (ids by time, a slot's rows spread over the table), ``text`` and
``tokens`` as a save computes them, the summary buffer of every slot compressed at least
once, and the compression log. Text is drawn from a vocabulary with a Zipf-like law (a few
words in most messages, most words rare). The message table's indexes are built after the
load, then the database is vacuumed and analyzed. The big database holds 3,000,000
messages in 60,000 slots of 5,000 users' 40,000 sessions: one slot of 200,000 messages,
100 of 5,000 to 20,000, the rest small; the small one the same shape at 20,000.

**The measures.** Each page and call through Django's test client (DEBUG off, throttles
off), the median of 5 after a warm-up, with its statement count, on each database in a
process of its own; the save runs in a transaction rolled back after it, so the databases
never change. Goals: at most 500 ms on the big database, at most 3x the small one's.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = os.environ.get("BENCH_SCALE_SERVER", "postgres://postgres@127.0.0.1:5432")
AGENTS = ["assistant", "researcher", "planner", "coder", "writer", "reviewer", "critic", "tutor"]
DAY_MS = 86_400_000
TRIGGER_PAIRS, KEEP_PAIRS = 20, 2  # the defaults the slots were compressed with
#: New messages per compression: what fits beside the summary (and the pairs it keeps).
STEP = 2 * TRIGGER_PAIRS - 2 * KEEP_PAIRS
COMMON, RARE, ABSENT = 0, -1, "qxqxzz"  # the vocabulary's most and least common; no word


@dataclass(frozen=True)
class Shape:
    """How many of each: messages, users, sessions, slots; the one long slot; the
    ``mid`` slots of ``mid_lo`` to ``mid_hi`` messages (the rest share what is left)."""

    messages: int
    users: int
    sessions: int
    slots: int
    big: int
    mid: int
    mid_lo: int
    mid_hi: int

    @classmethod
    def of(cls, messages: int) -> Shape:
        """The big database's shape scaled to ``messages``."""
        f = messages / 3_000_000
        users = max(1, round(5_000 * f))
        sessions = max(users, round(40_000 * f))
        slots = max(sessions + 1, round(60_000 * f))
        lo = max(1, round(5_000 * f))
        mid = min(100, slots // 4)
        return cls(messages, users, sessions, slots, max(2, round(200_000 * f)), mid, lo, 4 * lo)


SIZES = {"small": 20_000, "big": 3_000_000}


# -- the build ---------------------------------------------------------------------------
def vocabulary(rng: Any, size: int = 8_000) -> list[str]:
    """Pronounceable words, shortest first (the common ones are short, as in a language)."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.choice([1, 2, 2, 3, 3, 3, 4]))
        words.add("".join(rng.choice(syllables, n)))
    return sorted(rng.permutation(sorted(words)).tolist(), key=len)


def zipf_cdf(size: int, s: float = 1.1) -> Any:
    import numpy as np

    weights = 1.0 / np.arange(1, size + 1) ** s
    return np.cumsum(weights) / weights.sum()


@dataclass
class Plan:
    """Every slot's key, length, times and buffer; every message's slot and sequence number,
    in the order they were written."""

    keys: list[tuple[str, str, str]]
    lengths: Any
    starts: Any  # ms
    spans: Any  # ms
    order_slot: Any
    order_seq: Any
    order_ms: Any
    covered: Any  # the last compression's to_seq (0: never compressed)


def plan(shape: Shape, rng: Any, now_ms: int) -> Plan:
    import numpy as np

    lengths = np.empty(shape.slots, dtype=np.int64)
    lengths[0] = shape.big
    lengths[1 : 1 + shape.mid] = rng.integers(shape.mid_lo, shape.mid_hi + 1, shape.mid)
    rest = shape.slots - 1 - shape.mid
    left = shape.messages - int(lengths[: 1 + shape.mid].sum())
    if left < rest:
        raise ValueError(f"{shape} leaves fewer messages than slots")
    weights = rng.lognormal(0.0, 1.2, rest)
    share = np.floor(weights / weights.sum() * (left - rest)).astype(np.int64)
    share[rng.choice(rest, left - rest - int(share.sum()), replace=False)] += 1
    lengths[1 + shape.mid :] = share + 1
    year = 365 * DAY_MS
    starts = now_ms - rng.uniform(0, year, shape.slots)
    spans = np.minimum(rng.exponential(3 * 3_600_000, shape.slots), now_ms - starts)
    long = slice(0, 1 + shape.mid)  # the long conversations last the year
    starts[long] = now_ms - year + rng.uniform(0, 30 * DAY_MS, 1 + shape.mid)
    spans[long] = now_ms - starts[long] - rng.uniform(0, DAY_MS, 1 + shape.mid)
    slot_of = np.repeat(np.arange(shape.slots), lengths)
    seq = np.arange(shape.messages) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    times = starts[slot_of] + spans[slot_of] * seq / lengths[slot_of]
    order = np.argsort(times, kind="stable")
    # The first compression at 2 * TRIGGER_PAIRS + 1 messages, then every STEP more.
    first = 2 * TRIGGER_PAIRS + 1
    covered = np.where(lengths >= first, first + (lengths - first) // STEP * STEP, 0)
    return Plan(
        keys(shape, rng),
        lengths,
        starts,
        spans,
        slot_of[order],
        seq[order] + 1,
        times[order].astype(np.int64),
        covered,
    )


def keys(shape: Shape, rng: Any) -> list[tuple[str, str, str]]:
    """Each slot's key: the first ``sessions`` slots one per session (the long ones on
    sessions of their own), the others another agent of a session."""
    owners = [i % shape.users for i in range(shape.users)]
    owners += [int(u) for u in rng.integers(0, shape.users, shape.sessions - shape.users)]
    sessions = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(shape.sessions)]
    agents = [1] * shape.sessions
    result = [(str(owners[s] + 1), sessions[s], AGENTS[0]) for s in range(shape.sessions)]
    while len(result) < shape.slots:
        s = int(rng.integers(1 + shape.mid, shape.sessions))
        if agents[s] < len(AGENTS):
            result.append((str(owners[s] + 1), sessions[s], AGENTS[agents[s]]))
            agents[s] += 1
    return result


def summaries(rng: Any, words: list[str], cdf: Any, count: int = 64) -> list[list[Any]]:
    """Outputs of the configured summarizer over histories of the vocabulary's text."""
    from squad_memory.conf import app_settings
    from squad_memory.messages import validate_summary

    summarizer = app_settings.import_callable("SUMMARIZER")
    result = []
    for _ in range(count):
        history = [
            {"role": ("user", "assistant")[k % 2], "content": [{"text": s}], "citations": None}
            for k, s in enumerate(sentences(rng, words, cdf, 2 * TRIGGER_PAIRS + 1))
        ]
        result.append(validate_summary(summarizer(history, KEEP_PAIRS)))
    return result


def sentences(rng: Any, words: list[str], cdf: Any, n: int, lo: int = 8, hi: int = 60) -> list[str]:
    """``n`` texts of ``lo`` to ``hi`` words drawn by the Zipf law of ``cdf``."""
    import numpy as np

    sizes = rng.integers(lo, hi, n)
    drawn = np.searchsorted(cdf, rng.random(int(sizes.sum()))).tolist()
    result, at = [], 0
    for size in sizes.tolist():
        result.append(" ".join([words[i] for i in drawn[at : at + size]]))
        at += size
    return result


def _table(model: Any) -> str:
    return str(model._meta.db_table)


def _deferred(cursor: Any, model: Any) -> list[str]:
    """Drop a table's constraints and indexes but its primary key (a load is faster without
    them); the statements that make them again."""
    table = _table(model)
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype IN ('u', 'f')",
        [table],
    )
    constraints = cursor.fetchall()
    again = [f'ALTER TABLE "{table}" ADD CONSTRAINT "{n}" {d}' for n, d in constraints]
    for name, _ in constraints:
        cursor.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"')
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
        "AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE contype = 'p')",
        [table],
    )
    for name, definition in cursor.fetchall():
        cursor.execute(f'DROP INDEX "{name}"')
        again.insert(0, definition)
    return again


def load(shape: Shape, seed: int = 0) -> dict[str, float]:
    """Fill the migrated, empty database of Django's default connection (the module's
    text); the seconds of each part."""
    import numpy as np
    from django.contrib.auth.models import User
    from django.core.management.color import no_style
    from django.db import connection
    from rest_framework.authtoken.models import Token

    from squad_memory.models import Compression, Message, Slot

    rng = np.random.default_rng(seed)
    now_ms = int(time.time() * 1000)
    times, started = {}, time.perf_counter()
    words = vocabulary(rng)
    cdf = zipf_cdf(len(words))
    the_plan = plan(shape, rng, now_ms)
    pool = summaries(rng, words, cdf)
    times["plan"] = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '1GB'")  # this session's only
        cursor.execute("SET synchronous_commit = off")
        again = [*_deferred(cursor, Message), *_deferred(cursor, Compression)]
        tokens = _messages(cursor, the_plan, rng, words, cdf)
        times["messages"] = time.perf_counter() - started
        picks = rng.integers(0, len(pool), shape.slots)
        _slots(cursor, the_plan, tokens, pool, picks)
        _compressions(cursor, the_plan, pool, picks)
        times["slots"] = time.perf_counter() - started
        for statement in again:
            cursor.execute(statement)
        times["indexes"] = time.perf_counter() - started
    User.objects.create_user("bench-user", id=1)  # owns user_id "1": the long slot's
    User.objects.create_superuser("bench-staff", id=shape.users + 1)
    for user in User.objects.all():
        Token.objects.create(user=user, key=f"{user.username:0<40}"[:40])
    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [User, Slot, Compression]):
            cursor.execute(statement)
        cursor.execute("VACUUM (ANALYZE)")
    times["vacuum"] = time.perf_counter() - started
    return times


def _messages(cursor: Any, p: Plan, rng: Any, words: list[str], cdf: Any) -> Any:
    """COPY the messages in the order they were written; each slot's tokens after its
    pointer, and all of them (two arrays)."""
    import numpy as np

    from squad_memory.messages import extract_text
    from squad_memory.models import Message
    from squad_memory.rules import count_tokens

    names = ("slot", "seq", "role", "content", "citations", "timestamp", "text", "tokens")
    columns = ", ".join(f'"{Message._meta.get_field(n).column}"' for n in names)
    tail = np.zeros(len(p.lengths), dtype=np.int64)
    every = np.zeros(len(p.lengths), dtype=np.int64)
    sql = f'COPY "{_table(Message)}" ({columns}) FROM STDIN'
    with cursor.copy(sql) as copy:
        for at in range(0, len(p.order_slot), 50_000):
            slots = p.order_slot[at : at + 50_000]
            seqs = p.order_seq[at : at + 50_000]
            texts = sentences(rng, words, cdf, len(slots), 5, 50)
            counted = np.empty(len(slots), dtype=np.int64)
            lines = []
            rows = zip(
                slots.tolist(),
                seqs.tolist(),
                p.order_ms[at : at + 50_000].tolist(),
                texts,
                strict=True,
            )
            for k, (slot, seq, ms, text) in enumerate(rows):
                role = "assistant" if seq % 2 == 0 else "user"
                content = [{"text": text}]
                counted[k] = n = count_tokens({"role": role, "content": content})
                # The text is letters and spaces: this is json.dumps(content), and needs no
                # escaping for COPY.
                lines.append(
                    f'{slot + 1}\t{seq}\t{role}\t[{{"text": "{text}"}}]\t\\N\t{ms}\t'
                    f"{extract_text(content)}\t{n}\n"
                )
            copy.write("".join(lines))
            np.add.at(every, slots, counted)
            after = seqs > p.covered[slots]
            np.add.at(tail, slots[after], counted[after])
    return tail, every


def _copy_rows(cursor: Any, model: Any, rows: Iterator[dict[str, Any]]) -> None:
    """COPY rows of ``model``: each a dict of some fields' values, the others their
    defaults (JSON values as JSON text)."""
    fields = model._meta.concrete_fields
    columns = ", ".join(f'"{f.column}"' for f in fields)
    defaults = {f.attname: f.get_default() for f in fields}
    json_fields = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
    with cursor.copy(f'COPY "{_table(model)}" ({columns}) FROM STDIN') as copy:
        for row in rows:
            values = defaults | row
            for name in json_fields:
                if values[name] is not None:
                    values[name] = json.dumps(values[name])
            copy.write_row([values[f.attname] for f in fields])


def _when(ms: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC)


def _slots(cursor: Any, p: Plan, tokens: Any, pool: list[Any], picks: Any) -> None:
    """COPY the slots: counters of their messages, the buffer of the last compression."""
    from squad_memory.models import Slot
    from squad_memory.rules import count_all

    tail, every = tokens
    summary_tokens = [count_all(out) for out in pool]

    def rows() -> Iterator[dict[str, Any]]:
        for i, (user, session, agent) in enumerate(p.keys):
            n, covered = int(p.lengths[i]), int(p.covered[i])
            row = dict(id=i + 1, user_id=user, session_id=session, agent_id=agent)
            row.update(created_at=_when(p.starts[i]), last_seq=n, buffer_tokens=int(every[i]))
            row.update(updated_at=_when(p.starts[i] + p.spans[i] * (n - 1) / n))
            row.update(last_role="assistant" if n % 2 == 0 else "user")
            if covered:
                out, own = pool[picks[i]], summary_tokens[picks[i]]
                row.update(active=True, summary=out, summary_length=len(out))
                row.update(covered_seq=covered, version=_compressed(covered))
                row.update(summary_tokens=own, buffer_tokens=own + int(tail[i]))
            yield row

    _copy_rows(cursor, Slot, rows())


def _compressed(covered: int) -> int:
    """The compressions of a slot whose last one covered up to ``covered``."""
    return (covered - 2 * TRIGGER_PAIRS - 1) // STEP + 1 if covered else 0


def _covered(k: int) -> int:
    """The ``to_seq`` of a slot's ``k``-th compression (from 0)."""
    return 2 * TRIGGER_PAIRS + 1 + k * STEP


def _compressions(cursor: Any, p: Plan, pool: list[Any], picks: Any) -> None:
    """COPY the compression log: each slot's compressions, by reference, each covering
    the messages since the one before."""
    from squad_memory.models import Compression

    summarizer = "squad_memory.summarizers.offline.summarize"

    def rows() -> Iterator[dict[str, Any]]:
        pk = 0
        for i in map(int, p.covered.nonzero()[0]):
            covered, n = int(p.covered[i]), int(p.lengths[i])
            written = pool[picks[i]][: -2 * KEEP_PAIRS] or pool[picks[i]]
            previous = None
            for k in range(_compressed(covered)):
                pk += 1
                to = _covered(k)
                at = p.starts[i] + p.spans[i] * to / n
                yield dict(
                    id=pk,
                    slot_id=i + 1,
                    started_at=_when(at),
                    finished_at=_when(at + 2),
                    duration_ms=2,
                    from_seq=_covered(k - 1) + 1 if k else 1,
                    to_seq=to,
                    input=[],
                    output=written,
                    by_reference=True,
                    previous_id=previous,
                    kept_from_seq=to - 2 * KEEP_PAIRS + 1,
                    summarizer=summarizer,
                    outcome="applied",
                )
                previous = pk

    _copy_rows(cursor, Compression, rows())


# -- databases on demand -----------------------------------------------------------------
def marker(shape: Shape) -> str:
    """The comment a complete build leaves on its database."""
    return "bench.scale " + json.dumps(asdict(shape))


def ensure(shape: Shape) -> dict[str, Any]:
    """The database of Django's default connection built to ``shape``, unless a complete
    one is there already: the build's seconds, or (there already) the migrations applied
    to it since and their seconds."""
    from django.core.management import call_command
    from django.db import OperationalError, connection

    name = connection.settings_dict["NAME"]
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                "WHERE datname = current_database()"
            )
            found = cursor.fetchone()[0]
    except OperationalError:
        found = None  # no such database yet
    if found == marker(shape):
        return migrate()
    if found and found.startswith("bench.scale "):  # others may be reading it
        raise SystemExit(f"{name} holds another shape ({found}); drop it or pick another name.")
    connection.close()
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cursor.execute(f'CREATE DATABASE "{name}"')
    started = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    times = {"migrate": time.perf_counter() - started}
    times |= {k: v + times["migrate"] for k, v in load(shape).items()}
    with connection.cursor() as cursor:
        cursor.execute(f'COMMENT ON DATABASE "{name}" IS %s', [marker(shape)])
    return {"seconds": time.perf_counter() - started, "cumulative": times}


def migrate() -> dict[str, Any]:
    """Apply the migrations added since the database was built (a concurrent index build on
    the big database takes a minute; readers go on meanwhile); their names and seconds."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    started = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    applied = [f"{m.app_label}.{m.name}" for m, _ in pending]
    return {"migrated": applied, "seconds": time.perf_counter() - started}


def built(build: dict[str, Any] | None) -> str:
    """What :func:`ensure` did, in words."""
    if not build:
        return "there already"
    if "migrated" not in build:
        return f"built in {build['seconds']:.0f} s"
    if not build["migrated"]:
        return "there already, its migrations up to date"
    return f"there already, migrated ({', '.join(build['migrated'])}) in {build['seconds']:.0f} s"


# -- the measures ------------------------------------------------------------------------
RUNS = 5
LIMIT_MS, LIMIT_RATIO = 500.0, 3.0


def targets(shape: Shape, seed: int = 0) -> dict[str, Any]:
    """The words searched for and the long slot (the build's, drawn again from its seed)."""
    import numpy as np

    from squad_memory.models import Slot

    words = vocabulary(np.random.default_rng(seed))
    return {
        "common": words[COMMON],
        "rare": words[RARE],
        "absent": ABSENT,
        "slot": Slot.objects.get(pk=1),
        "deep_page": min(20_000, shape.messages // 100),  # the message list's 100 a page
    }


def calls(shape: Shape) -> dict[str, Callable[[], Any]]:
    """Each page and call measured, by name."""
    from agent_squad.types import ConversationMessage
    from django.db import transaction
    from django.test import Client
    from rest_framework.authtoken.models import Token

    import squad_memory

    t = targets(shape)
    slot, storage = t["slot"], squad_memory.get_storage()
    staff, owner = (Client(HTTP_AUTHORIZATION=f"Token {k.key}") for k in _tokens(Token))
    admin = Client()
    admin.force_login(Token.objects.get(user__is_staff=True).user)
    role = "user" if slot.last_role == "assistant" else "assistant"

    def save() -> Any:
        with transaction.atomic():  # rolled back: the database never changes
            said = ConversationMessage(role=role, content=[{"text": "one more question"}])
            storage.save_chat_message_sync(*slot.key, said)
            transaction.set_rollback(True)

    api, admin_ = "/api/search/?q=", "/admin/squad_memory"
    gets = {
        "API search, staff: a rare word": (staff, api + t["rare"]),
        "API search, staff: an absent word": (staff, api + t["absent"]),
        "API search, staff: a common word": (staff, api + t["common"]),
        "API search, one user's: a common word": (owner, api + t["common"]),
        "admin slots searched: a common word": (admin, f"{admin_}/slot/?q={t['common']}"),
        "admin slots searched: a rare word": (admin, f"{admin_}/slot/?q={t['rare']}"),
        "admin slots searched: a session id prefix": (
            admin,
            f"{admin_}/slot/?q={slot.session_id[:8]}",
        ),
        "admin messages: page 1": (admin, f"{admin_}/message/"),
        "admin messages: a role": (admin, f"{admin_}/message/?role__exact=user"),
        "admin messages: a slot": (admin, f"{admin_}/message/?slot__id__exact={slot.pk}"),
        "admin messages: a deep page": (admin, f"{admin_}/message/?p={t['deep_page']}"),
        "admin slot page: the long slot": (admin, f"{admin_}/slot/{slot.pk}/change/"),
        "API sessions, staff": (staff, "/api/sessions/"),
        "API session history: the long slot": (
            owner,
            f"/api/sessions/{slot.session_id}/history/",
        ),
    }
    found = {name: functools.partial(client.get, url) for name, (client, url) in gets.items()}
    return found | {
        "fetch_all_chats: the long slot": functools.partial(
            storage.fetch_all_chats_sync, slot.user_id, slot.session_id
        ),
        "fetch_chat: the long slot": functools.partial(storage.fetch_chat_sync, *slot.key),
        "save_chat_message: the long slot": save,
    }


def _tokens(token: Any) -> list[Any]:
    """The staff user's token, then the long slot's owner's."""
    return [token.objects.get(user__is_staff=True), token.objects.get(user__is_staff=False)]


def _keeping(call: Callable[[], Any], answers: list[Any]) -> None:
    answers.append(call())


def measure(shape: Shape, runs: int = RUNS) -> dict[str, dict[str, Any]]:
    """Each call's median ms of ``runs``, its statements (on a first run), and the status
    of its response."""
    from bench.workloads import count

    result = {}
    for name, call in calls(shape).items():
        answers: list[Any] = []
        statements = count(_keeping, call, answers)
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - started)
        status = getattr(answers[0], "status_code", None)
        result[name] = {
            "ms": statistics.median(seconds) * 1000,
            "statements": statements,
            "status": status,
        }
        print(f"  {name}: {result[name]['ms']:.1f} ms, {statements} statements", flush=True)
    return result


def one(messages: int, out: Path) -> None:
    """In this process, on the database of ``DATABASE_URL``: build it unless it is there
    (migrate it then), then mark it ready (``/tmp/<name>.ready``) and measure."""
    import django
    from django.contrib.auth.signals import user_logged_in
    from django.db import connection
    from django.test.utils import override_settings, setup_test_environment

    django.setup()
    setup_test_environment(debug=False)
    # The measures write nothing outside a rolled-back transaction: no session row for the
    # admin's login, no last_login.
    override_settings(SESSION_ENGINE="django.contrib.sessions.backends.signed_cookies").enable()
    user_logged_in.disconnect(dispatch_uid="update_last_login")
    shape = Shape.of(messages)
    build = ensure(shape)
    print(f"  {connection.settings_dict['NAME']}: {built(build)}", flush=True)
    Path(tempfile.gettempdir(), f"{connection.settings_dict['NAME']}.ready").touch()
    found = {"shape": asdict(shape), "build": build, "calls": measure(shape)}
    found["deep_page"] = targets(shape)["deep_page"]
    out.write_text(json.dumps(found, indent=1))


def goals(small: dict[str, Any], big: dict[str, Any]) -> list[dict[str, Any]]:
    """A row of the table per call: both sizes and the goals."""
    rows = []
    for name, at_big in big["calls"].items():
        at_small = small["calls"][name]
        ratio = at_big["ms"] / at_small["ms"]
        answered = at_big["status"] is None or at_big["status"] < 400  # 302: a capped page
        met = at_big["ms"] <= LIMIT_MS and ratio <= LIMIT_RATIO and answered
        rows.append(
            {
                "call": name,
                "small ms": at_small["ms"],
                "small statements": at_small["statements"],
                "big ms": at_big["ms"],
                "big statements": at_big["statements"],
                "status": at_big["status"] or "-",
                "big / small": ratio,
                "goal": "met" if met else "**not met**",
            }
        )
    return rows


def page(r: dict[str, Any]) -> str:
    """The results page of a run."""
    from bench.report import table

    small, big = r["small"], r["big"]
    builds = [
        f"{name} database ({v['shape']['messages']:,} messages): {built(v['build'])}"
        for name, v in r.items()
        if name in ("small", "big")
    ]
    return "\n\n".join(
        [
            "# Scale: the admin's pages and the API's calls on a big database",
            f"Taken on {r['when']} with `{r['command']}` (load average at the start / end: "
            f"{r['load_average']}).",
            "Median ms of 5 runs through Django's test client (DEBUG off), after a first run "
            "that counts the statements; status of the response. The save runs in a "
            "transaction rolled back (its commit is not timed); the admin's login is kept in a "
            "signed cookie (no session row to read). Goals: at most "
            f"{LIMIT_MS:.0f} ms on the big database and at most {LIMIT_RATIO:g}x the small "
            f"one's. Deep page: {small['deep_page']:,} (small), {big['deep_page']:,} (big).",
            "; ".join(builds) + ".",
            table(r["rows"]),
            f"Goals met: {sum(row['goal'] == 'met' for row in r['rows'])} of {len(r['rows'])}.",
        ]
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__)
    parser.add_argument("--small", type=int, default=SIZES["small"], help="messages")
    parser.add_argument("--big", type=int, default=SIZES["big"], help="messages")
    parser.add_argument("--database", default="sm_scale", help="big; small: NAME_small")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--one", type=int, help="messages: build and measure in this process")
    parser.add_argument("--json", type=Path, help="where --one writes its results")
    args = parser.parse_args(argv)
    if args.one:
        one(args.one, args.json)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    r: dict[str, Any] = {"load_average": ", ".join(f"{v:.2f}" for v in os.getloadavg())}
    for name, messages, db in (
        ("small", args.small, f"{args.database}_small"),
        ("big", args.big, args.database),
    ):
        print(f"{name}: {messages:,} messages in {db}", flush=True)
        path = args.out / f"scale-{name}.json"
        env = dict(
            os.environ, DATABASE_URL=f"{SERVER}/{db}", DJANGO_SETTINGS_MODULE="bench.settings"
        )
        env |= {f"API_THROTTLE_{s}": "none" for s in ("ANON", "USER", "SEARCH", "COMPRESS")}
        cmd = [sys.executable, "-m", "bench.scale", "--one", str(messages), "--json", str(path)]
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        r[name] = json.loads(path.read_text())
        path.unlink()
    r["load_average"] += " / " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    r["rows"] = goals(r["small"], r["big"])
    r["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    r["command"] = " ".join(["python -m bench scale", *argv])
    (args.out / "scale.json").write_text(json.dumps(r, indent=1))
    (args.out / "scale.md").write_text(page(r) + "\n")
    print(page(r))
    return 0 if all(row["goal"] == "met" for row in r["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

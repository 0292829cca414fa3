"""The test passes of ``make test`` as nox sessions, one environment each (``nox -l`` lists
them; ``nox -s sqlite`` runs one). ``make test`` runs them all in one environment;
.github/workflows/tests.yml runs them as parallel jobs. The services and their variables
are the README's: TEST_POSTGRES_URL, TEST_MYSQL_URL, TEST_REDIS_URL, TEST_AMQP_URL."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

PG_URL = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/squad_memory")
MYSQL_URL = os.environ.get("TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/squad_memory")
DJANGO = {"5.2": "Django>=5.2,<5.3", "6.1": "Django>=6.1,<6.2"}
PYTEST = ["pytest", "-q", "-p", "no:cacheprovider", "-n", os.environ.get("TEST_WORKERS", "2")]
PYTEST += ["--dist", "loadgroup"]


def install(session: nox.Session, django: str = "5.2") -> None:
    session.install("-r", "requirements-dev.txt", DJANGO[django])


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff (lint and format), mypy --strict and the import-linter contract."""
    install(session)
    session.run("ruff", "check", "squad_memory", "project", "tests", "bench")
    session.run("ruff", "format", "--check", "squad_memory", "project", "tests", "bench")
    session.run("mypy", "squad_memory")
    session.run("lint-imports", env={"PYTHONPATH": os.getcwd()})


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """The docs tier: the site, the docs' samples, the wheel and sdist, the layout."""
    install(session)
    # A module's tests on one process: the site and the packages are built once.
    session.run(*PYTEST, "-m", "docs and not postgres", "--dist", "loadfile", *session.posargs)


@nox.session(python="3.11")
def sqlite(session: nox.Session) -> None:
    """Every other tier on SQLite, Django 5.2; the one pass of the tests with no database."""
    install(session)
    session.run(*PYTEST, "-m", "not docs and not postgres", *session.posargs)


@nox.session(python="3.11")
def postgres(session: nox.Session) -> None:
    """The tests that use a database, on PostgreSQL, Django 5.2."""
    install(session)
    env = {"DATABASE_URL": PG_URL}
    session.run(*PYTEST, "-m", "not nodb and not docs", *session.posargs, env=env)


@nox.session(python="3.11")
def mariadb(session: nox.Session) -> None:
    """The core storage on MariaDB/MySQL."""
    install(session)
    session.run(
        *PYTEST,
        "-m",
        "mariadb and not nodb and not postgres",
        *session.posargs,
        env={"DATABASE_URL": MYSQL_URL},
    )


@nox.session(name="django6-sqlite", python="3.12")
def django6_sqlite(session: nox.Session) -> None:
    """Django 6.1 on SQLite: the core tier, and the database tests of the other tiers without
    brokers, workers or browsers."""
    install(session, "6.1")
    session.run(
        *PYTEST,
        "-m",
        "not services and not postgres and not docs and (core or not nodb)",
        *session.posargs,
    )


@nox.session(name="django6-postgres", python="3.12")
def django6_postgres(session: nox.Session) -> None:
    """Django 6.1 on PostgreSQL with server-side binding and prepared statements: the storage
    paths, search, replicas and the database threads."""
    install(session, "6.1")
    env = {"DATABASE_URL": f"{PG_URL}_dj6", "DATABASE_PREPARED": "1"}
    session.run(*PYTEST, "-m", "prepared and not nodb", *session.posargs, env=env)

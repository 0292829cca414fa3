"""The demo project's deployment settings: no start without a secret key outside DEBUG,
and a clean ``check --deploy`` with the documented variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRET = "k7#Qz!v9Lr2@xW4p$Tn8^Ys3&Bm6*Hd1(Jf5)Gc0-Ue2+Ia7=Ob4"


def run_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "API_THROTTLE_"))}
    base.update(PYTHONPATH=str(ROOT), SQUAD_MEMORY_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_documented_variables(tmp_path: Path) -> None:
    done = run_check(
        tmp_path,
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=SECRET,
        DJANGO_ALLOWED_HOSTS="demo.example",
        DATABASE_CONN_MAX_AGE="60",  # on PostgreSQL, W004 asks for it (or DATABASE_POOL=1)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


POSTGRES = "postgres://app@db.invalid:5432/app"  # never connected to: check reads settings


def test_on_postgresql_the_demo_settings_say_what_an_async_caller_needs(tmp_path: Path) -> None:
    """W004 with Django's default (CONN_MAX_AGE 0, no pool); silent with either variable."""
    base = {"DATABASE_URL": POSTGRES, "DJANGO_SECRET_KEY": SECRET}
    done = run_check(tmp_path, **base)
    assert "squad_memory.W004" in done.stdout + done.stderr
    for fix in ({"DATABASE_POOL": "1"}, {"DATABASE_CONN_MAX_AGE": "60"}):
        done = run_check(tmp_path, **base, **fix)
        assert "squad_memory.W004" not in done.stdout + done.stderr, fix


def test_no_start_without_a_secret_key_outside_debug(tmp_path: Path) -> None:
    done = run_check(tmp_path, DJANGO_DEBUG="0", DJANGO_ALLOWED_HOSTS="demo.example")
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "DJANGO_SECRET_KEY is not set" in done.stderr


def test_https_settings_can_be_switched_off(tmp_path: Path) -> None:
    done = run_check(
        tmp_path,
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=SECRET,
        DJANGO_ALLOWED_HOSTS="demo.example",
        DJANGO_SECURE_SSL_REDIRECT="0",
    )
    assert done.returncode != 0 and "security.W008" in done.stdout + done.stderr

"""Settings of the squad_memory demo project.

Everything comes from environment variables with embedded defaults: SQLite,
inline summarization and the offline summarizer, so it runs on a fresh machine.

- DJANGO_DEBUG: 1 (default) or 0. With 0, DJANGO_SECRET_KEY is required and the
  HTTPS settings below default to on, so `manage.py check --deploy` is clean with
  DJANGO_DEBUG=0, DJANGO_SECRET_KEY (50+ random characters) and DJANGO_ALLOWED_HOSTS
  (and on PostgreSQL DATABASE_POOL=1 or DATABASE_CONN_MAX_AGE=60, below)
- DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS (comma-separated)
- DJANGO_SECURE_SSL_REDIRECT, DJANGO_SECURE_COOKIES, DJANGO_SECURE_HSTS_SECONDS
  (default 31536000), DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS, DJANGO_SECURE_HSTS_PRELOAD:
  override the HTTPS settings (1/0); DJANGO_SECURE_PROXY_SSL_HEADER=1 trusts
  X-Forwarded-Proto from a TLS-terminating proxy

- DATABASE_URL: postgres://, mysql://, sqlite:/// (default: var/db.sqlite3)
- DATABASE_CONN_MAX_AGE: CONN_MAX_AGE in seconds, or "none" to keep connections
  (default 0: a connection per request, and per database call of an async caller outside
  one, such as AgentSquad in a bot or in `manage.py demo`: on PostgreSQL a turn several
  times slower, which system check squad_memory.W004 warns of). Above 0, CONN_HEALTH_CHECKS
  is on, so a kept connection that died is replaced before it is used
- DATABASE_POOL: on PostgreSQL, Django's connection pool (OPTIONS["pool"], Django 5.1+,
  pip install "psycopg[pool]"), what an async caller should use instead of CONN_MAX_AGE 0:
  1 for psycopg_pool's default sizes, or the most connections it holds (e.g. 20; unset: none)
- SQUAD_MEMORY_ADMISSION: 1 (default) or 0: squad_memory's AdmissionMiddleware, which bounds
  the requests (so the connections) one ASGI process serves at once
- SQUAD_MEMORY_DATABASE_THREADS: SQUAD_MEMORY["DATABASE_THREADS"] (default 20), that bound
- SQUAD_MEMORY_MODE: inline (default; `make demo` uses tasks), tasks or celery
- DJANGO_TASKS_BACKEND: the dotted path of the Tasks framework's backend in tasks mode (default:
  django-tasks-db's DatabaseBackend, run by `manage.py db_worker`)
- CELERY_BROKER_URL: redis://127.0.0.1:6379/0 or amqp://guest:guest@127.0.0.1:5672//
- CELERY_VISIBILITY_TIMEOUT: Redis broker only, seconds before a killed worker's task
  is delivered again (default 3600)
- SQUAD_MEMORY_SUMMARIZER: dotted path of the summarizer
- API_THROTTLE_ANON, API_THROTTLE_USER, API_THROTTLE_COMPRESS, API_THROTTLE_SEARCH,
  API_THROTTLE_AUTH_FAILURES: API rates such as "30/minute" (defaults 30/minute,
  600/minute, 10/minute, 60/minute, 20/minute), or "none"
- API_NUM_PROXIES: the reverse proxies in front of Django (default 0); the API counts
  a client by the address the nearest of them saw (REST_FRAMEWORK["NUM_PROXIES"])
- SQUAD_MEMORY_LLM_BACKEND (openai, anthropic), SQUAD_MEMORY_LLM_BASE_URL,
  SQUAD_MEMORY_LLM_API_KEY, SQUAD_MEMORY_LLM_MODEL, SQUAD_MEMORY_LLM_TIMEOUT:
  the LLM summarizer (squad_memory.summarizers.llm.summarize)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SQUAD_MEMORY_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. With DJANGO_DEBUG=0 the demo needs a secret key of its "
            "own, e.g. DJANGO_SECRET_KEY=$(python -c 'import secrets; "
            "print(secrets.token_urlsafe(50))')"
        )
    SECRET_KEY = "demo-only-insecure-key-for-debug"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")


def env_flag(name: str, default: bool) -> bool:
    """A boolean from the environment: 1/true/yes/on or 0/false/no/off."""
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


# HTTPS outside DEBUG: redirect, secure cookies, HSTS; each can be switched off.
SECURE_SSL_REDIRECT = env_flag("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_flag("DJANGO_SECURE_COOKIES", not DEBUG)
SECURE_HSTS_SECONDS = int(
    os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0" if DEBUG else "31536000")
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_flag("DJANGO_SECURE_HSTS_PRELOAD", not DEBUG)
if env_flag("DJANGO_SECURE_PROXY_SSL_HEADER", False):  # behind a proxy that terminates TLS
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "squad_memory",
    "project.demo",
]
# The REST API and its docs, where the api extra is installed (pip install 'squad-memory[api]').
API = importlib.util.find_spec("rest_framework") is not None
if API:
    INSTALLED_APPS[-2:-2] = [
        "rest_framework",
        "rest_framework.authtoken",
        "drf_spectacular",
        "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from static files
    ]

# Django's Tasks framework (SQUAD_MEMORY_MODE=tasks; the django-tasks backport on Django
# 5.2): compressions are rows of the database that `manage.py db_worker` runs, no broker.
if importlib.util.find_spec("django_tasks_db") is not None:  # the tasks extra
    INSTALLED_APPS.append("django_tasks_db")
    TASKS = {
        "default": {
            "BACKEND": os.environ.get("DJANGO_TASKS_BACKEND", "django_tasks_db.DatabaseBackend"),
            "QUEUES": [],  # any queue name
        }
    }

MIDDLEWARE = [
    # Under ASGI (project/asgi.py): at most SQUAD_MEMORY["DATABASE_THREADS"] requests at once
    # hold database connections, the others wait their turn (docs/howto/deployment.md).
    # Under WSGI it does nothing. SQUAD_MEMORY_ADMISSION=0 leaves it out.
    *(
        ["squad_memory.middleware.AdmissionMiddleware"]
        if env_flag("SQUAD_MEMORY_ADMISSION", True)
        else []
    ),
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"

_CONN_MAX_AGE = os.environ.get("DATABASE_CONN_MAX_AGE", "0")
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=None if _CONN_MAX_AGE.lower() == "none" else int(_CONN_MAX_AGE),
        # A kept connection is checked before a request (or an async call) uses it.
        conn_health_checks=_CONN_MAX_AGE != "0",
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Writers wait for the lock instead of failing at once.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 30
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
    # WAL: readers never block the writer; NORMAL sync is durable across process crashes.
    DATABASES["default"]["OPTIONS"]["init_command"] = (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
if (
    DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    and os.environ.get("DATABASE_PREPARED") == "1"
):
    # Server-side binding and psycopg's prepared statements (not through a transaction-mode
    # pooler such as PgBouncer before 1.21): Django's options, honoured by squad_memory's
    # own async connection too.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=5
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and (
    pool := os.environ.get("DATABASE_POOL")
):
    # What an async caller (AgentSquad outside a request: a bot, `asyncio.run`, this demo's
    # conversation) needs on PostgreSQL, or DATABASE_CONN_MAX_AGE=60: with neither, each of
    # its database calls opens and closes a connection (squad_memory.W004). The pool needs
    # CONN_MAX_AGE 0.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = (
        True if pool == "1" else {"max_size": int(pool)}
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A second alias on the same database, as a read replica would be: the alias the
    # read-replica router tests send reads to (tests/test_replicas.py). Nothing uses it
    # unless a router does; under test it mirrors "default" (no second test database).
    DATABASES["replica"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
# A database of its own for squad_memory's tables, as a project's router may keep them:
# tests/test_routing.py routes squad_memory's models here. Nothing uses it otherwise.
DATABASES["memory"] = {
    **DATABASES["default"],
    "NAME": (
        str(VAR_DIR / "memory.sqlite3")
        if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
        else f"{DATABASES['default']['NAME']}_memory"
    ),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    try:
        import pymysql

        pymysql.install_as_MySQLdb()
    except ImportError:
        pass
    DATABASES["default"].setdefault("OPTIONS", {})["charset"] = "utf8mb4"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

SQUAD_MEMORY = {
    "SUMMARIZER": os.environ.get(
        "SQUAD_MEMORY_SUMMARIZER", "squad_memory.summarizers.offline.summarize"
    ),
    "TRIGGER_AT": int(os.environ.get("SQUAD_MEMORY_TRIGGER_AT", "20")),
    "KEEP_LAST": int(os.environ.get("SQUAD_MEMORY_KEEP_LAST", "2")),
    "MODE": os.environ.get("SQUAD_MEMORY_MODE", "inline"),
    "DATABASE_THREADS": int(os.environ.get("SQUAD_MEMORY_DATABASE_THREADS", "20")),
    # With SQUAD_MEMORY_SUMMARIZER=squad_memory.summarizers.llm.summarize.
    "LLM": {
        key: value
        for key, value in (
            ("BACKEND", os.environ.get("SQUAD_MEMORY_LLM_BACKEND")),
            ("BASE_URL", os.environ.get("SQUAD_MEMORY_LLM_BASE_URL")),
            ("API_KEY", os.environ.get("SQUAD_MEMORY_LLM_API_KEY")),
            ("MODEL", os.environ.get("SQUAD_MEMORY_LLM_MODEL")),
            ("TIMEOUT", float(os.environ.get("SQUAD_MEMORY_LLM_TIMEOUT", "30"))),
        )
        if value
    },
}

# The REST API (squad_memory.api). Token first, so an anonymous request gets 401.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",  # the API's docs
    # Proxies in front of Django: X-Forwarded-For names the client only behind them.
    "NUM_PROXIES": int(os.environ.get("API_NUM_PROXIES", "0")),
    # Requests per client; "none" switches a rate off. 429 answers carry Retry-After.
    "DEFAULT_THROTTLE_RATES": {
        scope: None if rate.lower() == "none" else rate
        for scope, rate in (
            ("anon", os.environ.get("API_THROTTLE_ANON", "30/minute")),
            ("user", os.environ.get("API_THROTTLE_USER", "600/minute")),
            ("squad_memory_compress", os.environ.get("API_THROTTLE_COMPRESS", "10/minute")),
            ("squad_memory_search", os.environ.get("API_THROTTLE_SEARCH", "60/minute")),
            (
                "squad_memory_auth_failures",
                os.environ.get("API_THROTTLE_AUTH_FAILURES", "20/minute"),
            ),
        )
    },
}

# Celery (only used when SQUAD_MEMORY_MODE=celery).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A save that publishes a task must not wait long for an unreachable broker.
CELERY_BROKER_CONNECTION_TIMEOUT = float(os.environ.get("CELERY_BROKER_CONNECTION_TIMEOUT", "2"))
# Redis: a task whose worker was killed is delivered again after this many seconds
# (keep it above the longest summarization; RabbitMQ redelivers at once).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "3600")),
}
CELERY_TASK_IGNORE_RESULT = True
# Runs only under `celery -A project beat`: compresses slots left over the threshold.
CELERY_BEAT_SCHEDULE = {
    "squad-memory-sweep": {
        "task": "squad_memory.tasks.sweep",
        "schedule": float(os.environ.get("SQUAD_MEMORY_SWEEP_SECONDS", "300")),
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"squad_memory": {"handlers": ["console"], "level": "INFO"}},
}

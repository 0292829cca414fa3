"""The demo project's settings for a process connected through PgBouncer (transaction pooling).

Transaction pooling gives each transaction any server connection, so no named
(server-side) cursor may outlive one: Django's DISABLE_SERVER_SIDE_CURSORS; and no
prepared statement may either: client-side binding, psycopg's prepared statements off
(Django's defaults, restored here whatever ``DATABASE_PREPARED`` says).
"""

from __future__ import annotations

from project.settings import *  # noqa: F403

DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True  # noqa: F405
for _option in ("server_side_binding", "prepare_threshold"):
    DATABASES["default"].get("OPTIONS", {}).pop(_option, None)  # noqa: F405

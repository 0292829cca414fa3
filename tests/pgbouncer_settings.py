"""The demo project's settings for a process connected through PgBouncer (transaction pooling).

Transaction pooling gives each transaction any server connection, so no named
(server-side) cursor may outlive one: Django's DISABLE_SERVER_SIDE_CURSORS.
"""

from __future__ import annotations

from project.settings import *  # noqa: F403

DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True  # noqa: F405

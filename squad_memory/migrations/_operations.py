"""Operations the migrations share. The module's name starts with ``_``: Django's migration
loader skips it (it is not a migration)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """``AddIndexConcurrently`` on PostgreSQL, ``AddIndex`` elsewhere (the same state): a big
    table keeps taking writes while its index builds. A migration that uses it sets
    ``atomic = False`` (``CREATE INDEX CONCURRENTLY`` cannot run in a transaction);
    ``django.contrib.postgres`` is not imported, so a project without psycopg migrates too."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)
        return None

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)
        return None

"""Slots get an index by (namespace, user_id, updated_at, id): a user's sessions list walks
their slots newest first through it, a page at a time. On PostgreSQL it is built
``CONCURRENTLY`` (writes go on while it builds, so the migration runs outside a transaction);
elsewhere it is a plain ``CREATE INDEX``.
"""

from typing import Any

from django.db import migrations, models


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """``AddIndexConcurrently`` on PostgreSQL, ``AddIndex`` elsewhere (the same state);
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


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("squad_memory", "0008_message_slot_by_seq_index"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="slot",
            index=models.Index(
                fields=["namespace", "user_id", "updated_at", "id"],
                name="squad_memory_slot_activity",
            ),
        ),
    ]

"""Slots get an index by (namespace, user_id, updated_at, id): a user's sessions list walks
their slots newest first through it, a page at a time. On PostgreSQL it is built
``CONCURRENTLY`` (writes go on while it builds, so the migration runs outside a transaction);
elsewhere it is a plain ``CREATE INDEX``.
"""

from django.db import migrations, models

from squad_memory.migrations._operations import AddIndexConcurrentlyOnPostgres


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

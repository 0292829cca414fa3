"""The compression log gets an index by (started_at, id): the admin's list orders by
``-started_at, -id`` and its date drill-down reads the oldest and newest ``started_at``, so
without it the list's first page sorts the whole log. On PostgreSQL it is built
``CONCURRENTLY`` (writes go on while it builds, so the migration runs outside a transaction);
elsewhere it is a plain ``CREATE INDEX``.
"""

from django.db import migrations, models

from squad_memory.migrations._operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("squad_memory", "0009_slot_activity_index"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="compression",
            index=models.Index(fields=["started_at", "id"], name="squad_memory_comp_started"),
        ),
    ]

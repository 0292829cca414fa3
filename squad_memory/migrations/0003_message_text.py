"""Message.text: the plain text of a message, for search.

Rows stored before this migration get their text here, in batches. On
PostgreSQL a GIN index on ``to_tsvector('simple', translate(text, '<>', '  '))``
serves full-text search (:mod:`squad_memory.search` matches with exactly this
expression; angle brackets become spaces, or the parser would drop ``<word>`` as
a markup tag); other
databases get no index and search with a portable fallback. The index is
created by SQL guarded by the database vendor, so neither
``django.contrib.postgres`` nor PostgreSQL is required.
"""

from typing import Any

from django.db import migrations, models

INDEX = "squad_memory_message_text_fts"
# Kept equal to squad_memory.search.TSVECTOR (a migration must not change with the code).
TSVECTOR = "to_tsvector('simple', translate({column}, '<>', '  '))"
BATCH = 2000


def fill_text(apps: Any, schema_editor: Any) -> None:
    from squad_memory.messages import extract_text

    Message = apps.get_model("squad_memory", "Message")
    rows = Message.objects.using(schema_editor.connection.alias).order_by("pk")
    last = 0
    while True:
        batch = list(rows.filter(pk__gt=last).only("pk", "content")[:BATCH])
        if not batch:
            return
        for row in batch:
            row.text = extract_text(row.content)
        Message.objects.using(schema_editor.connection.alias).bulk_update(batch, ["text"])
        last = batch[-1].pk


def create_index(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON squad_memory_message "
            f"USING gin ({TSVECTOR.format(column='text')})"
        )


def drop_index(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("squad_memory", "0002_pipeline"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="text",
            field=models.TextField(
                blank=True,
                default="",
                help_text="Text of the content blocks and tool calls, extracted at save for search.",
                verbose_name="plain text",
            ),
        ),
        migrations.RunPython(fill_text, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(create_index, drop_index),
    ]

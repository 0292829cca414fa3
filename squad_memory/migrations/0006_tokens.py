"""Token budgets: each message's token count, and each slot's running totals.

Rows stored before this migration are counted here, in batches, by the configured
``TOKEN_COUNTER`` (the same function every later save uses), and every slot gets
its totals: ``summary_tokens`` (the summary prefix) and ``buffer_tokens`` (the
prefix plus the stored messages after ``covered_seq``).
"""

from typing import Any

from django.db import migrations, models

BATCH = 2000


def fill_message_tokens(apps: Any, schema_editor: Any) -> None:
    from squad_memory.rules import count_tokens as count

    Message = apps.get_model("squad_memory", "Message")
    rows = Message.objects.using(schema_editor.connection.alias).order_by("pk")
    last = 0
    while True:
        batch = list(rows.filter(pk__gt=last).only("pk", "role", "content", "citations")[:BATCH])
        if not batch:
            return
        for row in batch:
            row.tokens = count({"role": row.role, "content": row.content, "citations": row.citations})
        Message.objects.using(schema_editor.connection.alias).bulk_update(batch, ["tokens"])
        last = batch[-1].pk


def fill_slot_tokens(apps: Any, schema_editor: Any) -> None:
    from squad_memory.rules import count_all

    alias = schema_editor.connection.alias
    Slot = apps.get_model("squad_memory", "Slot")
    Message = apps.get_model("squad_memory", "Message")
    tail = (
        Message.objects.filter(slot_id=models.OuterRef("pk"), seq__gt=models.OuterRef("covered_seq"))
        .order_by()
        .values("slot_id")
        .annotate(total=models.Sum("tokens"))
        .values("total")[:1]
    )
    slots = Slot.objects.using(alias).order_by("pk").annotate(tail=models.Subquery(tail))
    last = 0
    while True:
        batch = list(slots.filter(pk__gt=last).only("pk", "summary")[:BATCH])
        if not batch:
            return
        for slot in batch:
            slot.summary_tokens = count_all(slot.summary or [])
            slot.buffer_tokens = slot.summary_tokens + (slot.tail or 0)
        Slot.objects.using(alias).bulk_update(batch, ["summary_tokens", "buffer_tokens"])
        last = batch[-1].pk


class Migration(migrations.Migration):
    dependencies = [
        ("squad_memory", "0005_log_by_reference"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="tokens",
            field=models.IntegerField(
                default=0, help_text="Counted once at save by TOKEN_COUNTER.", verbose_name="tokens"
            ),
        ),
        migrations.AddField(
            model_name="slot",
            name="buffer_tokens",
            field=models.BigIntegerField(
                default=0,
                help_text=(
                    "Tokens of the buffer: summary plus the messages after it (inactive: every "
                    "stored message)."
                ),
                verbose_name="buffer tokens",
            ),
        ),
        migrations.AddField(
            model_name="slot",
            name="max_buffer_tokens",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Overrides the storage's value.",
                null=True,
                verbose_name="hard limit (tokens)",
            ),
        ),
        migrations.AddField(
            model_name="slot",
            name="summary_tokens",
            field=models.IntegerField(default=0, verbose_name="summary tokens"),
        ),
        migrations.AddField(
            model_name="slot",
            name="trigger_tokens",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Overrides the storage's value.",
                null=True,
                verbose_name="trigger at (tokens)",
            ),
        ),
        migrations.RunPython(fill_message_tokens, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(fill_slot_tokens, migrations.RunPython.noop, elidable=True),
    ]

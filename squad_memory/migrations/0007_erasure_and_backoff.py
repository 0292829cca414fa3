"""Erasure of Idempotency-Key answers with their slot, and the backoff after a failure.

``IdempotencyKey.slot`` ties a stored answer (it holds the posted messages' text) to the
slot it stored into, so deleting or forgetting the slot deletes it. Answers stored before
this migration name their slot in their body (``{"slot": {"id": ...}}``): they are tied
to it here, and those whose slot is already gone are deleted (a retry replayed a slot
that no longer exists). ``Slot.retry_after``: after a failed compression, saves do not
call the summarizer again before it.
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def tie_answers_to_slots(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    keys = apps.get_model("squad_memory", "IdempotencyKey").objects.using(alias)
    slots = apps.get_model("squad_memory", "Slot").objects.using(alias)
    for row in keys.filter(slot__isnull=True).iterator():
        named = (row.body.get("slot") or {}).get("id") if isinstance(row.body, dict) else None
        if named is None:
            continue
        if slots.filter(pk=named).exists():
            keys.filter(pk=row.pk).update(slot_id=named)
        else:
            keys.filter(pk=row.pk).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("squad_memory", "0006_tokens"),
    ]

    operations = [
        migrations.AddField(
            model_name="idempotencykey",
            name="slot",
            field=models.ForeignKey(
                blank=True,
                help_text="The slot the answered post stored into.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="squad_memory.slot",
                verbose_name="slot",
            ),
        ),
        migrations.AddField(
            model_name="slot",
            name="retry_after",
            field=models.DateTimeField(
                blank=True,
                help_text="After a failed compression, no save or sweep claims another before this.",
                null=True,
                verbose_name="retry after",
            ),
        ),
        migrations.RunPython(tie_answers_to_slots, migrations.RunPython.noop),
    ]

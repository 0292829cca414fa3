"""Erasure of Idempotency-Key answers with their slot, and the backoff after a failure.

``IdempotencyKey.slot`` ties a stored answer (it holds the posted messages' text) to the
slot it stored into, so deleting or forgetting the slot deletes it. Answers stored before
this migration name their slot in their body (``{"slot": {"id": ...}}``): they are tied
to it here, and those whose slot is already gone are deleted (a retry replayed a slot
that no longer exists). ``Slot.retry_after``: after a failed compression, saves do not
call the summarizer again before it.

Not atomic: each new column commits at once (adding a nullable column is instant, but the
lock it takes would last until the end of the migration's transaction), and the answers
are tied in a transaction of their own, by two statements whatever their number, while
saves go on (docs/howto/upgrading.md).
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast


def tie_answers_to_slots(apps: Any, schema_editor: Any) -> None:
    """Each answer not tied yet whose body names a slot: tied to it if it exists, else
    deleted; answers that name none stay as they are."""
    alias = schema_editor.connection.alias
    keys = apps.get_model("squad_memory", "IdempotencyKey").objects.using(alias)
    slots = apps.get_model("squad_memory", "Slot").objects.using(alias)
    named = Cast(KeyTextTransform("id", KeyTransform("slot", "body")), models.BigIntegerField())
    untied = keys.filter(slot__isnull=True, body__slot__id__isnull=False).exclude(
        body__slot__id=None
    )
    untied = untied.alias(named=named)  # the key is there and not JSON's null
    untied.filter(named__in=slots.values("pk")).update(slot_id=named)
    untied.delete()  # evaluated again: those left untied


class Migration(migrations.Migration):
    atomic = False

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

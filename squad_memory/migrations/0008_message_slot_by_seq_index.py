"""Messages lose their index on ``slot_id`` alone: the unique (slot, seq) index leads with
``slot_id`` and serves every lookup by slot. The extra index cost every insert, and on
PostgreSQL it let the planner read a slot's whole history and sort it to find the buffer's
newest rows. Django re-adds the foreign key around the change, which checks the table once.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("squad_memory", "0007_erasure_and_backoff"),
    ]

    operations = [
        migrations.AlterField(
            model_name="message",
            name="slot",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="messages",
                to="squad_memory.slot",
                verbose_name="slot",
            ),
        ),
    ]

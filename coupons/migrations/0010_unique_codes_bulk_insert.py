"""Unique codes are inserted in bulk (COPY): the per-row costs PostgreSQL pays go (coupons.models.UniqueCode).

Code compared bytewise (collation "C"); created_at the database's; no foreign-key check per row on campaign and
batch; and no second index on the code: Django's varchar_pattern_ops index for LIKE is redundant under "C"
(the unique index serves LIKE 'PREFIX%' itself) and cost another random B-tree insert a row.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('campaigns', '0007_codes_campaigns'),
        ('coupons', '0009_unique_code_serial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='uniquecode',
            name='batch',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='codes', to='coupons.codebatch'),
        ),
        migrations.AlterField(
            model_name='uniquecode',
            name='campaign',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='unique_codes', to='campaigns.campaign'),
        ),
        migrations.AlterField(
            model_name='uniquecode',
            name='code',
            field=models.CharField(db_collation='C', max_length=40, unique=True),
        ),
        migrations.AlterField(
            model_name='uniquecode',
            name='created_at',
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
        migrations.RunSQL(
            "DROP INDEX IF EXISTS coupons_uniquecode_code_00a39b7f_like",
            "CREATE INDEX coupons_uniquecode_code_00a39b7f_like ON coupons_uniquecode (code varchar_pattern_ops)",
        ),
    ]

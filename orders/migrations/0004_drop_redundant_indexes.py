# Indexes that another index already covers, written for every claim the drain persists (bench/drain_bench.py):
#
# - orders_claim (campaign_id): claim_campaign_status (campaign_id, status) and claim_campaign_user
#   (campaign_id, user_id) both begin with it.
# - orders_claim claim_id varchar_pattern_ops ("_like"): Django adds it for LIKE 'prefix%' on a unique varchar;
#   nothing queries claim_id with LIKE / startswith (the admin's "=claim_id" search is iexact). The unique
#   constraint stays (the drain's ON CONFLICT (claim_id) arbiter).
#
# The foreign key itself is unchanged: only its index goes (state: db_index=False), without the drop and
# re-validation of the constraint that a plain AlterField would run.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0003_claim_key_digest'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='claim',
                    name='campaign',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name='claims', to='campaigns.campaign'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "orders_claim_campaign_id_b6cbc3a0"',
                    'CREATE INDEX IF NOT EXISTS "orders_claim_campaign_id_b6cbc3a0" ON "orders_claim" ("campaign_id")',
                ),
            ],
        ),
        migrations.RunSQL(
            'DROP INDEX IF EXISTS "orders_claim_claim_id_65944ac7_like"',
            'CREATE INDEX IF NOT EXISTS "orders_claim_claim_id_65944ac7_like" '
            'ON "orders_claim" ("claim_id" varchar_pattern_ops)',
        ),
    ]

# Indexes that another index already covers: every one of them is written again each time a coupon changes
# state (the row gets a new version: status is in indexes and in the partial indexes' predicates, so no
# update is HOT), each time the drain issues a coupon, and for every event. Measured with bench/expiry_sweep.py
# and bench/drain_bench.py (docs/benchmarks.md).
#
# - coupons_coupon (campaign_id): coupon_campaign_status (campaign_id, status) begins with it.
# - coupons_couponevent (coupon_id): event_coupon_time (coupon_id, created_at) begins with it.
# - coupons_coupon code and claim_id varchar_pattern_ops ("_like"): Django adds them for LIKE 'prefix%' on a
#   unique varchar; nothing queries these columns with LIKE / startswith (the admin's "=code" search is iexact,
#   UPPER(...) = UPPER(...), which no btree on the column serves). The unique constraints stay.
#
# The foreign keys themselves are unchanged: only the index goes (state: db_index=False), without the drop and
# re-validation of the constraint that a plain AlterField would run.

import django.db.models.deletion
from django.db import migrations, models

_LIKE_INDEXES = [
    ("coupons_coupon_code_40174643_like", "coupons_coupon", "code"),
    ("coupons_coupon_claim_id_116d1276_like", "coupons_coupon", "claim_id"),
]


class Migration(migrations.Migration):

    dependencies = [
        ('coupons', '0005_event_order'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='coupon',
                    name='campaign',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name='coupons', to='campaigns.campaign'),
                ),
                migrations.AlterField(
                    model_name='couponevent',
                    name='coupon',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name='events', to='coupons.coupon'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "coupons_coupon_campaign_id_5d074e29"',
                    'CREATE INDEX IF NOT EXISTS "coupons_coupon_campaign_id_5d074e29" '
                    'ON "coupons_coupon" ("campaign_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "coupons_couponevent_coupon_id_95ca162b"',
                    'CREATE INDEX IF NOT EXISTS "coupons_couponevent_coupon_id_95ca162b" '
                    'ON "coupons_couponevent" ("coupon_id")',
                ),
            ],
        ),
        *[
            migrations.RunSQL(
                f'DROP INDEX IF EXISTS "{name}"',
                f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}" varchar_pattern_ops)',
            )
            for name, table, column in _LIKE_INDEXES
        ],
    ]

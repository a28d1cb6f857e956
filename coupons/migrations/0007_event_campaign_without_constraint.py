# An event's campaign keeps its column and its index but loses its foreign key constraint: the event's coupon
# (whose foreign key stays) already holds the campaign, every writer copies campaign_id from the coupon's row,
# and a campaign with coupons cannot be deleted. The check PostgreSQL ran at every event's insert (one by one,
# at commit) was a sixth of the expiry sweep's time and ran for every coupon the drain issues.
# `manage.py verify_campaign` reports an event filed under another campaign than its coupon's.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('campaigns', '0006_campaign_rate_limit'),
        ('coupons', '0006_drop_redundant_indexes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='couponevent',
            name='campaign',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='coupon_events', to='campaigns.campaign'),
        ),
    ]

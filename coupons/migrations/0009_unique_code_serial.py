"""The serials of generated unique codes (coupons.unique_codes): one sequence, never reused, never cycled."""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("coupons", "0008_codes_campaigns"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE SEQUENCE coupons_unique_code_serial AS bigint MINVALUE 0 MAXVALUE 728999999 START 0 NO CYCLE",
            "DROP SEQUENCE coupons_unique_code_serial",
        ),
    ]

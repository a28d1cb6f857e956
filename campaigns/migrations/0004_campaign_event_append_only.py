from django.db import migrations

# The campaign audit log is append-only, like the coupon event log.
FORBID = """
CREATE OR REPLACE FUNCTION campaigns_campaignevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'campaigns_campaignevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER campaigns_campaignevent_append_only
    BEFORE UPDATE OR DELETE ON campaigns_campaignevent
    FOR EACH ROW EXECUTE FUNCTION campaigns_campaignevent_append_only();
"""
ALLOW = """
DROP TRIGGER IF EXISTS campaigns_campaignevent_append_only ON campaigns_campaignevent;
DROP FUNCTION IF EXISTS campaigns_campaignevent_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("campaigns", "0003_campaign_event")]
    operations = [migrations.RunSQL(FORBID, ALLOW)]

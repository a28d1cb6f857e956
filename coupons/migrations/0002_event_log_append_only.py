from django.db import migrations

# The event log is append-only: refuse UPDATE and DELETE of its rows in the database itself, so that no
# code path (admin, shell, a bug) can rewrite history. TRUNCATE (test teardown) is not affected.
FORBID = """
CREATE OR REPLACE FUNCTION coupons_couponevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'coupons_couponevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER coupons_couponevent_append_only
    BEFORE UPDATE OR DELETE ON coupons_couponevent
    FOR EACH ROW EXECUTE FUNCTION coupons_couponevent_append_only();
"""
ALLOW = """
DROP TRIGGER IF EXISTS coupons_couponevent_append_only ON coupons_couponevent;
DROP FUNCTION IF EXISTS coupons_couponevent_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("coupons", "0001_initial")]
    operations = [migrations.RunSQL(FORBID, ALLOW)]

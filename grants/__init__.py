"""Grants: coupons of a campaign given by operators to listed shoppers, through the claim's one atomic script
(docs/api.md, Grants; docs/operating.md, Granting coupons).

models.py (a batch run, its chunks), lines.py (a file or a list read into shopper ids, the rejected lines),
claims.py (a chunk's claim script calls in one pipeline), services.py (start, run, resume a batch),
tasks.py (a Celery task a chunk), apis.py (POST /api/v1/campaigns/{id}/grants), admin.py (the campaign page's
upload, progress and result), management/commands/grant.py.
"""

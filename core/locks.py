"""The project's PostgreSQL advisory locks, by name: the first key of pg_advisory_lock(key1, key2) and its kin.

Never renumber a member, and never reuse a number: a lock is the same lock only while every process, of this
release and of the one it replaces during a deploy, takes it under the same number. Add new ones at the end.
"""
from __future__ import annotations

import enum


class AdvisoryLock(enum.IntEnum):
    # Session lock (campaigns.rebuild.campaign_repair_lock), second key the campaign id: one rebuild or repair
    # (reconciliation) of a campaign at a time.
    CAMPAIGN_REPAIR = 7301
    # Transaction lock (coupons.services), second key hashtext(shopper id): one use of a new-shopper coupon per
    # shopper at a time, so two at once can't both count as the shopper's first.
    NEW_SHOPPER_USE = 7302
    # Transaction lock (coupons.extension), second key the extension's id: the batches of one validity extension
    # take turns. "EXTV" in ASCII.
    VALIDITY_EXTENSION = 0x45585456

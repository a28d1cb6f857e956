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
    # Transaction lock (campaigns.services), second key hashtext(the upper-case code): a shared code is checked
    # unique among campaigns not ended and saved (create, edit, publish) one at a time. "SHCD" in ASCII.
    SHARED_CODE = 0x53484344
    # Transaction lock (coupons.services), second key hashtext of a shared code's use (campaign, shopper, order)
    # or of a shopper in a unique-codes campaign: the use's Redis take and its coupon row are written by one
    # request at a time, and a shopper's unique codes are counted against the per-user limit one at a time.
    # "CUSE" in ASCII.
    CODE_USE = 0x43555345
    # Transaction lock (coupons.services), second key hashtext of (shopper, order id): the coupons of one order
    # are reserved and redeemed one at a time, so each new one is priced after every other the order holds
    # (two at once can't both pass the combination check). "ORDR" in ASCII.
    ORDER_COUPONS = 0x4F524452

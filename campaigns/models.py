"""What an operator defines: a campaign, its window, stock, limits and the coupon rule it issues."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from core.i18n import StrOrPromise

from . import pricing
from .money import MINOR_UNITS, Discount, minor_unit
from .rich_rules import RICH_KINDS, rule_errors, tiers_of


class DiscountType(models.TextChoices):
    FIXED = "fixed", _("Fixed amount off")
    PERCENT = "percent", _("Percentage off")
    TIERS = "tiers", _("Tiers (spend more, save more)")
    FREE_SHIPPING = "free_shipping", _("Free shipping")
    BUY_GET = "buy_get", _("Buy N get M free")


class Audience(models.TextChoices):
    ALL = "all", _("Everyone")
    NEW = "new", _("New shoppers only")


class CampaignKind(models.TextChoices):
    GRAB = "grab", _("Grab (shoppers claim coupons)")
    CODES = "codes", _("Codes typed at checkout")
    GRANT = "grant", _("Granted by operators only")


# A shared code as an operator types it (stored upper case): 4-32 of [A-Z0-9-] (docs/api.md, codes typed at checkout).
SHARED_CODE_PATTERN = r"[A-Z0-9-]{4,32}"
SHARED_CODE_RE = re.compile(SHARED_CODE_PATTERN)


def shared_code_form(text: str) -> str | None:
    """Return a shared code as it is stored (upper case) if `text` is one (case-insensitive), else None."""
    code = text.upper()
    return code if text.isascii() and SHARED_CODE_RE.fullmatch(code) else None


# A SKU or a category, in a campaign's scope and in a cart's lines (docs/api.md, Carts): 1-64 of these.
SCOPE_NAME_PATTERN = r"[A-Za-z0-9_.:/-]{1,64}"
SCOPE_NAME_RE = re.compile(SCOPE_NAME_PATTERN)
SCOPE_LIST_MAX = 200  # names in one include or exclude list
SCOPE_LISTS = ("include_categories", "exclude_categories", "include_skus", "exclude_skus")
# An audience tag or a channel (docs/api.md, Shoppers: a tag is 1-32 of [a-z0-9_-]); a campaign names at most 20.
AUDIENCE_NAME_RE = re.compile(r"[a-z0-9_-]{1,32}")
AUDIENCE_LIST_MAX = 20


def _scope_list(help_text: StrOrPromise, verbose_name: StrOrPromise) -> ArrayField:
    return ArrayField(models.CharField(max_length=64), default=list, blank=True, help_text=help_text,
                      verbose_name=verbose_name)


class CampaignState(models.TextChoices):
    DRAFT = "draft", pgettext_lazy("campaign state", "Draft")
    SCHEDULED = "scheduled", pgettext_lazy("campaign state", "Scheduled")
    LIVE = "live", pgettext_lazy("campaign state", "Live")
    PAUSED = "paused", pgettext_lazy("campaign state", "Paused")
    ENDED = "ended", pgettext_lazy("campaign state", "Ended")


class CampaignQuerySet(models.QuerySet["Campaign"]):
    def published(self) -> CampaignQuerySet:
        return self.filter(published_at__isnull=False)

    def with_shared_code(self, code: str, *, at: datetime) -> CampaignQuerySet:
        """Return the campaigns not ended at `at` (drafts included) whose shared code is `code` (upper case):
        at most one, once saved through campaigns.services (the code is unique among them)."""
        return self.filter(kind=CampaignKind.CODES, code=code, ends_at__gt=at)

    def visible(self, *, at: datetime) -> CampaignQuerySet:
        """Return the published campaigns that are live or upcoming at `at` (shoppers' campaigns: not a grant
        campaign, which only operators give out)."""
        return self.published().filter(ends_at__gt=at).exclude(kind=CampaignKind.GRANT)

    def with_redis_state(self, *, at: datetime, grace: timedelta) -> CampaignQuerySet:
        """Return the campaigns whose Redis keys may still exist (published, not past end + grace)."""
        return self.filter(preheated_at__isnull=False, ends_at__gt=at - grace)

    def due_for_preheat(self, *, at: datetime, lead: timedelta) -> CampaignQuerySet:
        """Return published campaigns starting within `lead` that were never loaded into Redis."""
        return self.published().filter(preheated_at__isnull=True, starts_at__lte=at + lead, ends_at__gt=at)


MAX_BUCKETS = 64  # a campaign's stock split over at most this many hash slots (campaigns/redis_state/keys.py)


class Campaign(models.Model):
    name = models.CharField(max_length=200, verbose_name=_("name"))
    kind = models.CharField(max_length=5, choices=CampaignKind.choices, default=CampaignKind.GRAB,
        verbose_name=_("kind"))
    code = models.CharField(  # noqa: DJ001 (NULL = no shared code: a grab campaign, or unique codes)
        max_length=32, null=True, blank=True,
        help_text=_("A codes campaign's shared code (e.g. SAVE50), unique among campaigns not ended; empty: unique "
                  "codes generated or imported per shopper."), verbose_name=_("code")
    )
    starts_at = models.DateTimeField(verbose_name=_("starts at"))
    ends_at = models.DateTimeField(verbose_name=_("ends at"))
    total_stock = models.PositiveIntegerField(verbose_name=_("total stock"))
    per_user_limit = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)],
        verbose_name=_("per user limit"))
    paused = models.BooleanField(default=False, verbose_name=_("paused"))
    buckets = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_BUCKETS)],
        help_text=_("Redis hash slots the stock is split over (1-64; a grab campaign only): more spread one hot "
                    "campaign's claims over more Redis masters. Fixed once the campaign is loaded into Redis."),
        verbose_name=_("buckets"))
    rate_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text=_("Claims this campaign admits per second (others get 429). Empty: 10 x its stock, at least 1,000."),
            verbose_name=_("rate limit")
    )
    published_at = models.DateTimeField(null=True, blank=True, help_text=_("Unset while a draft."),
        verbose_name=_("published at"))
    preheated_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text=_("When its state was first loaded into Redis."),
            verbose_name=_("preheated at")
    )

    # The coupon rule: one template per campaign.
    discount_type = models.CharField(max_length=16, choices=DiscountType.choices, default=DiscountType.FIXED,
        verbose_name=_("discount type"))
    discount_value = models.DecimalField(max_digits=12, decimal_places=2, verbose_name=_("discount value"))
    max_discount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True,
        verbose_name=_("max discount"))
    min_spend = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0"), verbose_name=_("min spend"))
    currency = models.CharField(max_length=3, default="CNY", choices=[(c, c) for c in sorted(MINOR_UNITS)],
        verbose_name=_("currency"))
    valid_from = models.DateTimeField(
        null=True, blank=True, help_text=_("Absolute validity: coupons are usable from then (default: the claim)."),
            verbose_name=_("valid from")
    )
    valid_until = models.DateTimeField(
        null=True, blank=True, help_text=_("Absolute validity: usable until then, inclusive to the second."),
            verbose_name=_("valid until")
    )
    valid_days = models.PositiveIntegerField(null=True, blank=True, help_text=_("Relative validity: days after claim."),
        verbose_name=_("valid days"))
    audience = models.CharField(max_length=3, choices=Audience.choices, default=Audience.ALL,
        verbose_name=_("audience"))
    # Audience tags (signed into the shopper's token, X-Shopper-Tags) and channels (the storefront key's): checked in
    # the claim's atomic step (claim.lua) and at use, without a database query (docs/api.md, Richer rules).
    audience_tags = ArrayField(
        models.CharField(max_length=32), default=list, blank=True,
        help_text=_("Only shoppers whose token carries one of these tags may claim or use it, comma-separated "
                    "(empty: every shopper)."), verbose_name=_("audience tags"))
    channels = ArrayField(
        models.CharField(max_length=32), default=list, blank=True,
        help_text=_("Only shoppers of storefronts of these channels may claim or use it, comma-separated (empty: "
                    "every storefront, and tokens of the default key)."), verbose_name=_("channels"))

    # Scope and stacking (issue 20): the names campaigns.pricing.CouponRule gives them; coupon_rule() adapts.
    include_categories = _scope_list(_("Categories whose lines the coupon covers, comma-separated (with the SKUs "
                                       "included: either lists a line). Empty, and no SKUs included: every line."),
                                     verbose_name=_("include categories"))
    exclude_categories = _scope_list(_("Categories never covered, comma-separated (an exclude always wins)."),
                                     verbose_name=_("exclude categories"))
    include_skus = _scope_list(_("SKUs the coupon covers, comma-separated."), verbose_name=_("include SKUs"))
    exclude_skus = _scope_list(_("SKUs never covered, comma-separated."), verbose_name=_("exclude SKUs"))
    min_quantity = models.PositiveIntegerField(
        default=0, blank=True, help_text=_("Items of covered lines the cart must hold (0: no minimum)."),
            verbose_name=_("min quantity"))
    exclusive = models.BooleanField(default=False, help_text=_("Combines with no other coupon on an order."),
        verbose_name=_("exclusive"))
    combinable_with = ArrayField(
        models.BigIntegerField(), default=list, blank=True,
        help_text=_("Ids of the campaigns whose coupons may share an order with this one, comma-separated (empty: "
                  "any coupon that is not exclusive; both campaigns must admit each other)."),
                      verbose_name=_("combinable with"))
    order_cap = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text=_("The most all the coupons of an order holding this one may take off together (empty: no cap)."),
            verbose_name=_("order cap"))

    # Richer rules (issue 38; campaigns/rich_rules.py): a tiers or buy N get M discount_type's own fields.
    tiers = models.JSONField(
        default=list, blank=True,
        help_text=_("A tiers rule's steps, [threshold, amount off, is a percentage] each, going up; the first "
                    "threshold is the minimum spend."), verbose_name=_("tiers"))
    buy_quantity = models.PositiveSmallIntegerField(
        default=0, blank=True, help_text=_("Buy N get M: the N items bought (0 for other rules)."),
        verbose_name=_("buy quantity"))
    get_quantity = models.PositiveSmallIntegerField(
        default=0, blank=True, help_text=_("Buy N get M: the M cheapest items given (0 for other rules)."),
        verbose_name=_("get quantity"))

    # Operators' daily tools (issue 37; docs/api.md, Grants, budgets, groups).
    budget = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        help_text=_("The most all the campaign's coupons or codes may take off together, in its currency (empty: "
                    "no budget)."), verbose_name=_("budget"))
    group = models.CharField(
        max_length=64, blank=True, default="",
        help_text=_("Campaigns of one group share a per-shopper limit (empty: no group)."), verbose_name=_("group"))
    group_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Coupons one shopper may hold of all the group's campaigns together."),
        verbose_name=_("group limit"))

    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    objects = CampaignQuerySet.as_manager()

    class Meta:
        verbose_name = _("campaign")
        verbose_name_plural = _("campaigns")
        ordering = ["-starts_at", "-id"]
        indexes = [models.Index(fields=["code"], condition=Q(code__isnull=False), name="campaign_shared_code")]
        constraints = [
            models.CheckConstraint(condition=Q(total_stock__gte=0), name="campaign_stock_not_negative"),
            models.CheckConstraint(condition=Q(starts_at__lt=F("ends_at")), name="campaign_starts_before_ends"),
            models.CheckConstraint(condition=Q(per_user_limit__gte=1), name="campaign_per_user_limit_positive"),
            models.CheckConstraint(condition=Q(buckets__gte=1) & Q(buckets__lte=MAX_BUCKETS),
                                   name="campaign_buckets_in_range"),
            models.CheckConstraint(condition=Q(buckets=1) | Q(kind="grab"), name="campaign_buckets_grab_only"),
            models.CheckConstraint(
                condition=(Q(discount_type__in=["fixed", "percent"]) & Q(discount_value__gt=0))
                | (Q(discount_type__in=list(RICH_KINDS)) & Q(discount_value=0)), name="campaign_discount_by_kind"),
            models.CheckConstraint(condition=(Q(discount_type="tiers") & ~Q(tiers=[]))
                                   | (~Q(discount_type="tiers") & Q(tiers=[])), name="campaign_tiers_by_kind"),
            models.CheckConstraint(
                condition=(Q(discount_type="buy_get") & Q(buy_quantity__gte=1) & Q(get_quantity__gte=1))
                | (~Q(discount_type="buy_get") & Q(buy_quantity=0) & Q(get_quantity=0)),
                name="campaign_buy_get_by_kind"),
            models.CheckConstraint(
                condition=~Q(discount_type="percent") | Q(discount_value__lte=100),
                name="campaign_percent_at_most_100",
            ),
            models.CheckConstraint(condition=Q(min_spend__gte=0), name="campaign_min_spend_not_negative"),
            models.CheckConstraint(condition=Q(order_cap__isnull=True) | Q(order_cap__gt=0),
                                   name="campaign_order_cap_positive"),
            models.CheckConstraint(
                condition=Q(code__isnull=True) | (Q(kind="codes") & Q(code__regex=rf"^{SHARED_CODE_PATTERN}$")),
                name="campaign_shared_code_form",
            ),
            models.CheckConstraint(condition=Q(budget__isnull=True) | Q(budget__gt=0), name="campaign_budget_positive"),
            models.CheckConstraint(
                condition=(Q(group="") & Q(group_limit__isnull=True))
                | (~Q(group="") & Q(group__regex=rf"^{SCOPE_NAME_PATTERN}$") & Q(group_limit__gte=1)),
                name="campaign_group_with_limit"),
            models.CheckConstraint(
                condition=(Q(valid_until__isnull=True) & Q(valid_days__gte=1))
                | (Q(valid_until__isnull=False) & Q(valid_days__isnull=True)),
                name="campaign_validity_absolute_xor_relative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.code is not None:
            self.code = self.code.upper() or None  # a shared code is stored upper case; empty is none
        super().save(*args, **kwargs)

    @property
    def is_codes(self) -> bool:
        return self.kind == CampaignKind.CODES

    def shared_code_conflict(self) -> str | None:
        """Why this campaign's shared code can't be used (its form, or another campaign not ended holds it),
        or None. Not race-free alone: campaigns.services checks it again under the shared code's lock."""
        if not self.code:
            return None
        if self.kind != CampaignKind.CODES:
            return gettext("Only a codes campaign has a shared code.")
        code = shared_code_form(self.code)
        if code is None:
            return gettext("A shared code is 4-32 of A-Z, 0-9 and '-' (case does not count).")
        others = Campaign.objects.with_shared_code(code, at=timezone.now()).exclude(pk=self.pk)
        if self.ends_at is not None and self.ends_at > timezone.now() and others.exists():
            return gettext("The code %(code)s belongs to another campaign that has not ended.") % {"code": code}
        return None

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.code is not None:
            self.code = self.code.strip().upper() or None
        conflict = self.shared_code_conflict()
        if conflict:
            errors["code"] = conflict
        if self.starts_at and self.ends_at and self.starts_at >= self.ends_at:
            errors["ends_at"] = gettext("The campaign must end after it starts.")
        if self.buckets != 1 and self.kind != CampaignKind.GRAB:
            errors["buckets"] = gettext("Only a grab campaign's stock can be split into buckets.")
        for field in ("audience_tags", "channels"):
            names = getattr(self, field) or []
            if len(names) > AUDIENCE_LIST_MAX or any(not AUDIENCE_NAME_RE.fullmatch(name) for name in names):
                errors[field] = gettext("At most %(n)d names of a-z, 0-9, _ and - (1-32 characters each).") % {
                    "n": AUDIENCE_LIST_MAX}
        if self.budget is not None and self.budget <= 0:
            errors["budget"] = gettext("A budget is more than 0.")
        if self.group and not SCOPE_NAME_RE.fullmatch(self.group):
            errors["group"] = gettext("A group's name is 1-64 of A-Z, a-z, 0-9 and _.:/-.")
        elif bool(self.group) != (self.group_limit is not None):
            errors["group_limit"] = gettext("A group needs its limit, and a limit its group.")
        elif self.group_limit is not None and self.group_limit < 1:
            errors["group_limit"] = gettext("A group's limit is at least 1.")
        elif self.group and self.buckets != 1:  # its keys live in the group's one slot (docs/design.md, Groups)
            errors["buckets"] = gettext("A campaign of a group has one bucket.")
        errors.update(self._group_fixed_errors())
        errors.update(rule_errors(self))  # tiers, free shipping, buy N get M (campaigns.rich_rules)
        if self.discount_type not in RICH_KINDS and self.discount_value is not None and self.discount_value <= 0:
            errors["discount_value"] = gettext("A discount is more than 0.")
        elif self.discount_type == DiscountType.PERCENT and self.discount_value and self.discount_value > 100:
            errors["discount_value"] = gettext("A percentage discount is at most 100.")
        if (self.valid_until is None) == (self.valid_days is None):
            errors["valid_days"] = gettext("Give either an absolute validity (valid until) or a number of days, "
                                           "not both.")
        if self.valid_until and self.ends_at and self.valid_until < self.ends_at:
            errors["valid_until"] = gettext("Coupons must stay valid at least until the campaign ends.")
        if self.valid_from and (self.valid_until is None or self.valid_from >= self.valid_until):
            errors["valid_from"] = gettext("valid from needs a later valid until (absolute validity).")
        if self.discount_type == DiscountType.FIXED and self.max_discount is not None:
            errors["max_discount"] = gettext("A cap applies to percentage discounts only.")
        errors.update(self._scope_errors())
        places = MINOR_UNITS.get(self.currency)
        if places is None:
            errors["currency"] = gettext("Unknown currency: use an ISO 4217 code such as CNY, USD, EUR, JPY.")
        else:
            amounts = ["max_discount", "min_spend", "order_cap"]
            if self.discount_type == DiscountType.FIXED:
                amounts.append("discount_value")
            unit = Decimal(1).scaleb(-places)
            for name in amounts:
                value = getattr(self, name)
                if value is not None and value != value.quantize(unit):
                    errors[name] = gettext("%(currency)s amounts have at most %(places)s decimals.") % {
                        "currency": self.currency, "places": places}
        if errors:
            raise ValidationError(errors)

    def _group_fixed_errors(self) -> dict[str, str]:
        """A campaign's group and its limit are fixed once it is in Redis (its keys are named after the group, and
        each process keeps them: campaigns.redis_state.keys), as its buckets are."""
        if self.pk is None:
            return {}
        saved = Campaign.objects.filter(pk=self.pk, preheated_at__isnull=False).values("group", "group_limit").first()
        if saved is None or (saved["group"], saved["group_limit"]) == (self.group, self.group_limit):
            return {}
        return {"group": gettext("A campaign's group and its limit can't change once it is loaded into Redis.")}

    def _scope_errors(self) -> dict[str, str]:
        """The scope lists' and combination's problems (names, duplicates, unknown or own campaign ids)."""
        errors: dict[str, str] = {}
        for name in SCOPE_LISTS:
            values = getattr(self, name) or []
            bad = [value for value in values if not (isinstance(value, str) and SCOPE_NAME_RE.fullmatch(value))]
            if bad:
                errors[name] = gettext("Names are 1-64 of A-Z a-z 0-9 _ . : / - (not %(name)s).") % {
                    "name": repr(bad[0])}
            elif len(values) > SCOPE_LIST_MAX:
                errors[name] = gettext("At most %(max)s names.") % {"max": SCOPE_LIST_MAX}
            else:
                setattr(self, name, sorted(set(values)))
        ids = sorted(set(self.combinable_with or []))
        self.combinable_with = ids
        if ids and self.exclusive:
            errors["combinable_with"] = gettext("An exclusive campaign combines with no other: leave this empty.")
        elif self.pk is not None and self.pk in ids:
            errors["combinable_with"] = gettext("A campaign's coupons never share an order with each other.")
        elif len(ids) > SCOPE_LIST_MAX:
            errors["combinable_with"] = gettext("At most %(max)s campaigns.") % {"max": SCOPE_LIST_MAX}
        elif ids:
            known = set(Campaign.objects.filter(pk__in=ids).values_list("pk", flat=True))
            unknown = [i for i in ids if i not in known]
            if unknown:
                errors["combinable_with"] = gettext("No campaign #%(id)s.") % {"id": unknown[0]}
        if self.order_cap is not None and self.order_cap <= 0:
            errors["order_cap"] = gettext("An order cap is positive (empty: none).")
        return errors

    @property
    def is_scoped(self) -> bool:
        """Whether the rule needs the cart's lines: a product or category scope, a minimum quantity, or items to
        give (buy N get M)."""
        return (self.discount_type == DiscountType.BUY_GET or self.min_quantity > 0
                or any(getattr(self, name) for name in SCOPE_LISTS))

    def coupon_rule(self) -> pricing.CouponRule:
        """This campaign's coupon rule as campaigns.pricing prices it: the one adapter of a Campaign's fields."""
        return pricing.CouponRule(
            discount_type=self.discount_type, discount_value=self.discount_value, currency=self.currency,
            max_discount=self.max_discount, min_spend=self.min_spend,
            include_categories=frozenset(self.include_categories),
            exclude_categories=frozenset(self.exclude_categories),
            include_skus=frozenset(self.include_skus), exclude_skus=frozenset(self.exclude_skus),
            min_quantity=self.min_quantity, exclusive=self.exclusive, combinable_with=frozenset(self.combinable_with),
            order_cap=self.order_cap, tiers=tiers_of(self.tiers) if self.tiers else (),
            buy=self.buy_quantity, get=self.get_quantity,
        )

    def candidate(self, code: str) -> pricing.Candidate:
        """A coupon of this campaign (its code) as campaigns.pricing's candidate."""
        return pricing.Candidate(code=code, campaign_id=self.pk or 0, rule=self.coupon_rule())

    def state_at(self, at: datetime) -> CampaignState:
        """Return the campaign's status at `at`: it follows from publication, window and pause flag."""
        if self.published_at is None:
            return CampaignState.DRAFT
        if at >= self.ends_at:
            return CampaignState.ENDED
        if self.paused:
            return CampaignState.PAUSED
        if at < self.starts_at:
            return CampaignState.SCHEDULED
        return CampaignState.LIVE

    @property
    def admits_per_second(self) -> int:
        """The campaign's claim rate limit: as set, or about 10 times its stock (the seed's advice)."""
        return self.rate_limit if self.rate_limit else max(1000, 10 * self.total_stock)

    @property
    def state(self) -> CampaignState:
        return self.state_at(timezone.now())

    def coupon_validity(self, claimed_at: datetime) -> tuple[datetime, datetime]:
        """Return (valid_from, expires_at) of a coupon claimed at `claimed_at`, in whole seconds.

        Relative validity counts calendar days in the operator's zone: claimed at 10:00 the day before a
        DST change, valid until 10:00 local N days later (23 or 25 real hours for that day). A coupon is
        usable up to and including the second of expires_at (see Coupon.is_expired_at).
        """
        if self.valid_days is not None:
            local = timezone.localtime(claimed_at)  # settings.TIME_ZONE, the operator's zone
            expires = (local + timedelta(days=self.valid_days)).astimezone(UTC)
            return claimed_at, expires.replace(microsecond=0)
        assert self.valid_until is not None
        valid_from = self.valid_from if self.valid_from is not None else min(claimed_at, self.valid_until)
        return valid_from, self.valid_until.replace(microsecond=0)

    def discount_for(self, order_amount: Decimal) -> Discount:
        """Return the discount this campaign's rule gives an order of `order_amount` (its currency) alone: priced
        by campaigns.pricing on a cart of one line of that amount (0 when the rule refuses it: under its minimum
        spend, or a scope that needs the cart's lines)."""
        cart = pricing.whole_order_cart(order_amount, self.currency)
        result = pricing.price_coupon(cart, self.candidate(""))
        discount = result.discount if result.applicable and not self.is_scoped else Decimal(0).quantize(
            minor_unit(self.currency))
        return Discount(amount=discount, payable=cart.amount - discount)


class CampaignEventType(models.TextChoices):
    PUBLISHED = "published", _("Published")
    PAUSED = "paused", _("Paused")
    RESUMED = "resumed", _("Resumed")
    END_EXTENDED = "end_extended", _("End extended")
    VALIDITY_EXTENDED = "validity_extended", _("Coupon validity extended")
    REBUILT = "rebuilt", _("Redis state rebuilt")
    STOCK_ADDED = "stock_added", _("Stock added")
    CLOSED = "closed", _("Closed (final figures)")


class CampaignEvent(models.Model):
    """An operator's or the system's action on a campaign (audit log). Append-only, like CouponEvent."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="events", verbose_name=_("campaign"))
    type = models.CharField(max_length=20, choices=CampaignEventType.choices, verbose_name=_("type"))
    data = models.JSONField(default=dict, blank=True, verbose_name=_("data"))
    actor = models.CharField(max_length=150, help_text=_("The operator's username, or the job that acted."),
        verbose_name=_("actor"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("campaign event")
        verbose_name_plural = _("campaign events")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["campaign", "created_at"], name="campaign_event_time")]

    def __str__(self) -> str:
        return f"{self.type} #{self.campaign_id} by {self.actor}"

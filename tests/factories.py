"""factory_boy factories: the one place tests build rows."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import factory
from django.utils import timezone

from campaigns.models import Campaign


class CampaignFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Campaign

    name = factory.Sequence(lambda n: f"Campaign {n}")
    starts_at = factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=1))
    ends_at = factory.LazyAttribute(lambda c: c.starts_at + timedelta(hours=2))
    total_stock = 10
    per_user_limit = 1
    discount_value = Decimal("50.00")
    min_spend = Decimal("300.00")
    valid_days = 30
    published_at = factory.LazyFunction(timezone.now)

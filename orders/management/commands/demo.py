"""python manage.py demo: a live demo campaign, an operator login, and curl lines ready to paste."""
from __future__ import annotations

import json
import os
import secrets
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import CommandParser
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign, CampaignKind
from campaigns.services import campaign_create
from core.auth import mint_token
from core.commands import OperatorCommand

DEMO_NAME = "Demo flash sale: 50.00 off 300.00"
DEMO_CODE_NAME = "Demo shared code SAVE50: 50.00 off 300.00 at checkout"
DEMO_CODE = "SAVE50"
OPERATOR = "operator"


class Command(OperatorCommand):
    help = _("Create (or reuse) a live demo campaign and an operator login; print curl lines to try the API.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", default="http://127.0.0.1:8000", help=gettext("where the service answers"))
        parser.add_argument("--stock", type=int, default=100, help=gettext("total stock of each demo campaign"))

    def handle(self, *args: Any, **opts: Any) -> None:
        now = timezone.now()
        campaign = Campaign.objects.published().filter(name=DEMO_NAME, starts_at__lte=now, ends_at__gt=now).first()
        if campaign is None:
            campaign = campaign_create(
                name=DEMO_NAME, total_stock=opts["stock"], per_user_limit=1, starts_at=now,
                ends_at=now + timedelta(days=7), discount_value=Decimal("50.00"), min_spend=Decimal("300.00"),
                valid_days=30, publish=True,
            )
        code_campaign = Campaign.objects.published().with_shared_code(DEMO_CODE, at=now).filter(
            starts_at__lte=now).first()
        if code_campaign is None:
            code_campaign = campaign_create(
                name=DEMO_CODE_NAME, total_stock=opts["stock"], per_user_limit=1, starts_at=now,
                ends_at=now + timedelta(days=7), discount_value=Decimal("50.00"), min_spend=Decimal("300.00"),
                valid_days=30, kind=CampaignKind.CODES, code=DEMO_CODE, publish=True,
            )
        data_dir = Path(os.environ.get("COUPONRUSH_DATA_DIR") or settings.BASE_DIR / "var")
        password_file = data_dir / "demo-operator.txt"
        user_model = get_user_model()
        if not user_model.objects.filter(username=OPERATOR).exists():
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser(OPERATOR, f"{OPERATOR}@example.com", password)
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password + "\n")
        password = (
            password_file.read_text().strip()
            if password_file.exists()
            else gettext("(unchanged: manage.py changepassword operator)")
        )

        base = opts["base_url"].rstrip("/")
        shopper = "demo-shopper-1"
        token = mint_token(shopper, ttl=settings.COUPONS_TOKEN_MAX_TTL)
        headers = f"-H 'X-User-Id: {shopper}' -H 'X-Token: {token}'"
        lines = [
            "",
            gettext("Demo campaign #%(id)s: %(name)s (stock %(stock)s, 1 per shopper)")
            % {"id": campaign.pk, "name": campaign.name, "stock": campaign.total_stock},
            gettext("Demo shared code %(code)s (campaign #%(id)s): %(stock)s uses, 1 per shopper, typed at checkout")
            % {"code": code_campaign.code, "id": code_campaign.pk, "stock": code_campaign.total_stock},
            gettext("Operator console: %(url)s  user %(user)s  password %(password)s")
            % {"url": f"{base}/{settings.ADMIN_URL}", "user": OPERATOR, "password": password},
            gettext("API docs:         %(url)s") % {"url": f"{base}/api/docs/"},
            "",
            gettext("Try it (the token is valid for an hour; mint more with: python manage.py mint_token USER):"),
            f"  curl -s {base}/api/v1/campaigns/{campaign.pk}",
            f"  curl -s -X POST {headers} -H 'Idempotency-Key: try-1' {base}/api/v1/campaigns/{campaign.pk}/claim",
            f"  curl -s {headers} {base}/api/v1/claims/CLAIM_ID_FROM_ABOVE",
            f"  curl -s {headers} {base}/api/v1/me/coupons",
            f"  curl -s -X POST {headers} -H 'Idempotency-Key: code-1' -H 'Content-Type: application/json' "
            f"-d '{{\"order_id\": \"A-1001\", \"order_amount\": \"350.00\", \"currency\": \"CNY\"}}' "
            f"{base}/api/v1/coupons/{code_campaign.code}/redeem",
            f"  python manage.py verify_campaign {campaign.pk}",
            "",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.write(json.dumps({"id": campaign.pk, "code_campaign": code_campaign.pk, "code": code_campaign.code,
                                      "operator": OPERATOR, "shopper": shopper}))

"""The campaign's own errors (the base classes are core.errors')."""
from __future__ import annotations

from core.errors import ApplicationError, Unavailable


class CampaignStateLost(Unavailable):
    message = "The campaign's state is missing from Redis; an operator must rebuild it (manage.py preheat)."


class CampaignOver(ApplicationError):
    """The campaign ended longer ago than the grace period: it has nothing to keep in Redis."""

    http_status = 409
    code = 409
    status = "campaign_over"
    message = "The campaign ended more than the grace period ago; there is nothing to load into Redis."


class CampaignDraft(ApplicationError):
    """A draft is never loaded into Redis (shoppers can't see it, so they must not claim it either)."""

    http_status = 409
    code = 409
    status = "campaign_draft"
    message = "The campaign is a draft: publish it first (publishing loads it into Redis)."


class InvalidCampaign(ApplicationError):
    """A campaign definition an operator gave is not valid; `errors` maps field -> messages."""

    http_status = 400
    code = 400
    status = "invalid_request"

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items()))

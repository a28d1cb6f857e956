"""Domain errors with a stable code and status slug (CONTRACT.md); one handler renders them."""
from __future__ import annotations


class ApplicationError(Exception):
    http_status = 200
    code = 0
    status = "error"
    message = ""

    def __init__(self, message: str = "", **extra: object) -> None:
        super().__init__(message or self.message)
        self.message = message or self.message
        self.extra = extra


class NotFound(ApplicationError):
    http_status = 404
    code = 404
    status = "not_found"
    message = "Not found."


class Unavailable(ApplicationError):
    http_status = 503
    code = 503
    status = "unavailable"
    message = "A required store is unavailable; nothing was changed. Retry shortly."


class CampaignStateLost(Unavailable):
    message = "The campaign's state is missing from Redis; an operator must rebuild it (manage.py preheat)."


class CampaignOver(ApplicationError):
    """The campaign ended longer ago than the grace period: it has nothing to keep in Redis."""

    http_status = 409
    code = 409
    status = "campaign_over"
    message = "The campaign ended more than the grace period ago; there is nothing to load into Redis."


class InvalidCampaign(ApplicationError):
    """A campaign definition an operator gave is not valid; `errors` maps field -> messages."""

    http_status = 400
    code = 400
    status = "invalid_request"

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items()))

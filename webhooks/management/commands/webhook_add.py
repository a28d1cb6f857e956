"""manage.py webhook_add URL --secret S [--events a,b]: register a webhook endpoint; prints {"id": ...}."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from core.errors import ApplicationError
from webhooks.services import endpoint_add


class Command(OperatorCommand):
    help = _("Register a webhook endpoint (URL checked: private and loopback addresses refused); prints {\"id\": ...}.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("url", help=gettext("the https URL the deliveries are posted to"))
        parser.add_argument("--secret", required=True, help=gettext("the signing secret (8-200 printable characters)"))
        parser.add_argument("--events", default="", help=gettext("comma-separated event types (default: all)"))
        parser.add_argument("--description", default="", help=gettext("a note for operators"))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            endpoint = endpoint_add(url=options["url"], secret=options["secret"],
                                    event_types=options["events"].split(","), description=options["description"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(json.dumps({"id": endpoint.pk, "url": endpoint.url, "events": endpoint.event_types}))

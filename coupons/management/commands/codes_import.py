"""python manage.py codes_import CAMPAIGN FILE: legacy unique codes, all or nothing."""
from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from core.commands import OperatorCommand
from core.errors import ApplicationError
from coupons.code_batches import CodesImportRefused, code_batch_import


class Command(OperatorCommand):
    help = _("Import a codes campaign's legacy unique codes from FILE ('-' for stdin): one code a line, or the CSV "
            "codes_export writes (header code,status,holder,batch). Codes are upper-cased and trimmed, 4-40 of "
            "A-Z, 0-9 and '-'. All or nothing: on any bad line (malformed, twice in the file, already a code) "
            "nothing is imported, every bad line is listed on stderr and the exit code is 1. Prints one JSON line "
            "{\"batch\": ..., \"count\": N}.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        parser.add_argument("file", help=gettext("the file of codes, or - for stdin"))
        parser.add_argument("--actor", default="manage.py codes_import",
                            help=gettext("who asked (the batch's created_by)"))

    def handle(self, *args: Any, **opts: Any) -> None:
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        try:
            if opts["file"] == "-":
                batch = code_batch_import(campaign=campaign, lines=sys.stdin, created_by=opts["actor"])
            else:
                with open(opts["file"], encoding="utf-8-sig", errors="replace", newline="") as lines:
                    batch = code_batch_import(campaign=campaign, lines=lines, created_by=opts["actor"])
        except OSError as exc:
            raise CommandError(f"{opts['file']}: {exc.strerror}") from exc
        except CodesImportRefused as exc:
            for problem in exc.problems:
                self.stderr.write(str(problem))
            raise CommandError(exc.message) from exc
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(gettext("imported %(count)s codes into %(campaign)s (batch %(batch)s)")
                          % {"count": f"{batch.inserted:,}", "campaign": campaign, "batch": batch.pk})
        self.stdout.write(json.dumps({"batch": batch.pk, "count": batch.inserted}))

"""python manage.py grant CAMPAIGN FILE [--batch NAME]: one coupon of the campaign to each shopper listed in FILE
(one id a line, or a CSV with a user_id column), with progress on stderr; ends with one JSON line."""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.commands import OperatorCommand
from core.errors import ApplicationError
from grants.claims import GrantStopped
from grants.lines import FileRefused, read_file
from grants.models import BATCH_NAME_PATTERN, GrantBatch, GrantChunk, GrantSource
from grants.services import (
    grant_batch_resume,
    grant_batch_run,
    grant_batch_start,
    grantable_campaign,
    unfinished_batch,
)


class Command(OperatorCommand):
    help = _("Grant one coupon of a campaign to each shopper listed in a file (one id a line, or a CSV with a "
             "user_id column). The same batch run again grants nothing twice; a batch stopped half-way resumes.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        parser.add_argument("file", help=gettext("the shoppers' ids: one a line, or a CSV with a user_id column"))
        parser.add_argument("--batch", help=gettext("the batch's name (default: from the file's content); the same "
                                                   "name again grants nothing twice"))

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["batch"]
        if name is not None and not re.fullmatch(BATCH_NAME_PATTERN, name):
            raise CommandError(gettext("--batch: 1-64 of A-Z a-z 0-9 _ . : -"))
        limit = settings.COUPONS_GRANTS_MAX_FILE_BYTES
        try:
            if os.path.getsize(opts["file"]) > limit:  # refused before it is read
                raise FileRefused(gettext("the file has more than the %(limit)s bytes a grant takes")
                                  % {"limit": f"{limit:,}"})
            with open(opts["file"], "rb") as file:
                read = read_file(file.read(limit + 1), max_bytes=limit)
        except OSError as exc:
            raise CommandError(gettext("cannot read %(file)s: %(error)s") % {"file": opts["file"], "error": exc}) \
                from exc
        except FileRefused as exc:
            raise CommandError(gettext("refused, nothing granted: %(reason)s") % {"reason": exc}) from exc
        name = name or f"file-{read.digest[:16]}"
        try:
            campaign = grantable_campaign(opts["campaign"])
            batch = unfinished_batch(campaign=campaign, name=name)
            if batch is not None and batch.file_digest != read.digest:
                raise CommandError(gettext("batch %(batch)s was started with another file and is not finished: "
                                           "run it with that file to resume it") % {"batch": name})
            if batch is not None:
                self.stderr.write(gettext("resuming batch %(batch)s at chunk %(done)s of %(chunks)s")
                                  % {"batch": name, "done": batch.chunks_done, "chunks": batch.chunks})
                batch = grant_batch_resume(batch=batch)
            else:
                batch = grant_batch_start(campaign=campaign, name=name, source=GrantSource.COMMAND, read=read,
                                          actor="command")
            self.stderr.write(gettext("%(lines)s lines: %(valid)s to grant, %(invalid)s invalid, %(duplicate)s "
                                      "duplicate") % {"lines": read.lines, "valid": len(read.user_ids),
                                                      "invalid": read.invalid, "duplicate": read.duplicate})
            batch = grant_batch_run(batch=batch, progress=Progress(self, batch))
        except GrantStopped as exc:
            raise CommandError(gettext("batch %(batch)s stopped: %(reason)s; once fixed, run the same command "
                                       "again to resume it") % {"batch": name, "reason": exc}) from exc
        except ApplicationError as exc:
            raise CommandError(gettext("batch %(batch)s: %(reason)s") % {"batch": name, "reason": exc.message}) \
                from exc
        if batch.already_granted:
            self.stderr.write(gettext("%(count)s shoppers were granted by an earlier run of this batch (not again)")
                              % {"count": batch.already_granted})
        self.stdout.write(json.dumps(batch.counts))


class Progress:
    """A progress line on stderr at most twice a second: chunks done, granted so far, grants per second."""

    @staticmethod
    def last(batch: GrantBatch) -> bool:
        return not GrantChunk.objects.filter(batch=batch, done=False).exists()

    def __init__(self, command: Command, batch: GrantBatch) -> None:
        self.command, self.start, self.shown = command, time.monotonic(), 0.0
        self.first_done = batch.chunks_done

    def __call__(self, batch: GrantBatch) -> None:
        now = time.monotonic()
        if now - self.shown < 0.5 and not self.last(batch):
            return
        self.shown = now
        batch.refresh_from_db()
        rate = (batch.chunks_done - self.first_done) * 1000 / max(now - self.start, 1e-6)
        self.command.stderr.write(gettext("chunk %(done)s/%(chunks)s (%(percent).0f%%): granted %(granted)s, limit "
                                          "reached %(limit)s, sold out %(sold_out)s, ~%(rate).0f shoppers/s")
                                  % {"done": batch.chunks_done, "chunks": batch.chunks, "percent": batch.progress * 100,
                                     "granted": batch.granted, "limit": batch.limit_reached,
                                     "sold_out": batch.sold_out, "rate": rate})

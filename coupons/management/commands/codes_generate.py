"""python manage.py codes_generate CAMPAIGN --count N [--prefix P]: N new unique codes for a codes campaign."""
from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign
from core.commands import OperatorCommand
from core.errors import ApplicationError
from coupons.code_batches import CHUNK, code_batch_create, code_batch_generate, code_batch_send
from coupons.models import CodeBatch, CodeBatchSource, CodeBatchState

NO_WORKER_WARNING_SECONDS = 15.0


class Command(OperatorCommand):
    help = _(
        "Generate N unique codes for a codes campaign (no shared code), in committed chunks, printing progress "
        "on stderr and one JSON line {\"batch\": ..., \"count\": N} at the end. The codes are made in this process "
        "(no worker needed) unless --worker hands the batch to the Celery worker (this command then follows it). "
        "--resume BATCH finishes a batch that was interrupted (exact count, no duplicates)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", type=int, help=gettext("campaign id"))
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--count", type=int, help=gettext("codes to generate, 1 to 10,000,000 (chunks of %(chunk)s)")
                          % {"chunk": f"{CHUNK:,}"})
        what.add_argument("--resume", type=int, metavar="BATCH", help=gettext("finish this batch (its id)"))
        parser.add_argument("--prefix", default="",
                            help=gettext("1-16 letters and digits before the code (upper-cased)"))
        parser.add_argument("--worker", action="store_true",
                            help=gettext("let the Celery worker generate the batch; follow its progress here"))
        parser.add_argument("--chunk", type=int, default=CHUNK,
                            help=gettext("codes per transaction (default %(chunk)s)")
                            % {"chunk": f"{CHUNK:,}"})
        parser.add_argument("--actor", default="manage.py codes_generate",
                            help=gettext("who asked (the batch's created_by)"))

    def handle(self, *args: Any, **opts: Any) -> None:
        if not 1 <= opts["chunk"] <= 100_000:
            raise CommandError(gettext("--chunk: 1 to 100,000"))
        campaign = Campaign.objects.filter(pk=opts["campaign"]).first()
        if campaign is None:
            raise CommandError(gettext("No campaign #%(id)s.") % {"id": opts["campaign"]})
        try:
            if opts["resume"] is not None:
                found = CodeBatch.objects.filter(pk=opts["resume"], campaign=campaign,
                                                 source=CodeBatchSource.GENERATED).first()
                if found is None:
                    raise CommandError(gettext("--resume: campaign #%(campaign)s has no generated batch #%(batch)s.")
                                       % {"campaign": campaign.pk, "batch": opts["resume"]})
                batch = found
            else:
                batch = code_batch_create(campaign=campaign, count=opts["count"], prefix=opts["prefix"],
                                          created_by=opts["actor"])
            values = {"batch": batch.pk, "count": f"{batch.requested:,}", "campaign": campaign, "prefix": batch.prefix}
            self.stderr.write(
                gettext("batch %(batch)s: %(count)s codes for %(campaign)s, prefix %(prefix)s") % values
                if batch.prefix else gettext("batch %(batch)s: %(count)s codes for %(campaign)s") % values)
            progress = Progress(self.stderr.write, batch)
            if opts["worker"]:
                code_batch_send(batch=batch)  # sent at once: management commands run in autocommit
                batch = self._follow(batch.pk, progress)
            else:
                batch = code_batch_generate(batch_id=batch.pk, chunk=opts["chunk"], progress=progress)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        if batch.state != CodeBatchState.DONE:
            raise CommandError(gettext("batch %(batch)s %(state)s: %(error)s; finish it with --resume %(batch)s")
                               % {"batch": batch.pk, "state": batch.get_state_display(), "error": batch.error})
        progress(batch, final=True)
        self.stdout.write(json.dumps({"batch": batch.pk, "count": batch.inserted}))

    def _follow(self, batch_id: int, progress: Progress) -> CodeBatch:
        """Poll the batch the worker fills until it is done or failed (Ctrl-C stops following, not the worker)."""
        sent, warned = time.monotonic(), False
        while True:
            batch = CodeBatch.objects.get(pk=batch_id)
            if batch.state in (CodeBatchState.DONE, CodeBatchState.FAILED):
                return batch
            progress(batch)
            if batch.state == CodeBatchState.PENDING and not warned \
                    and time.monotonic() - sent > NO_WORKER_WARNING_SECONDS:
                self.stderr.write(gettext("no worker has started the batch yet: is `celery -A config worker` "
                                          "running? (or run without --worker)"))
                warned = True
            time.sleep(1.0)


class Progress:
    """Print a batch's progress at most once a second: codes made, share, rate since this command started."""

    def __init__(self, write: Any, batch: CodeBatch) -> None:
        self.write, self.start, self.first, self.last = write, time.monotonic(), batch.inserted, 0.0

    def __call__(self, batch: CodeBatch, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < 1.0:
            return
        self.last = now
        rate = (batch.inserted - self.first) / max(now - self.start, 1e-9)
        share = 100 * batch.inserted / batch.requested if batch.requested else 100.0
        self.write(gettext("batch %(batch)s: %(inserted)s / %(requested)s codes (%(share)s%%), %(rate)s codes/s, "
                           "%(state)s")
                   % {"batch": batch.pk, "inserted": f"{batch.inserted:,}", "requested": f"{batch.requested:,}",
                      "share": f"{share:.0f}", "rate": f"{rate:,.0f}", "state": batch.get_state_display()})

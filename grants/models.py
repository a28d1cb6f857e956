"""A grant batch run (its counts, progress and status) and its chunks of shopper ids."""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from campaigns.models import Campaign

# A batch's name (the Idempotency-Key of its grants is built from it and the shopper: grants/claims.py).
BATCH_NAME_PATTERN = r"[A-Za-z0-9_.:-]{1,64}"


class GrantStatus(models.TextChoices):
    RUNNING = "running", _("Running")
    STOPPED = "stopped", _("Stopped (resume it)")
    DONE = "done", _("Done")


class GrantSource(models.TextChoices):
    COMMAND = "command", _("Command")
    ADMIN = "admin", _("Admin upload")
    API = "api", _("API")


UNFINISHED = (GrantStatus.RUNNING, GrantStatus.STOPPED)


class GrantBatch(models.Model):
    """One run of a batch: a file or a list read into chunks of valid shopper ids, each chunk granted through the
    claim script and counted once (its `done` set in the transaction that adds its counts here)."""

    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="grant_batches",
                                 verbose_name=_("campaign"))
    name = models.CharField(max_length=64, verbose_name=_("batch"))
    source = models.CharField(max_length=8, choices=GrantSource.choices, verbose_name=_("source"))
    actor = models.CharField(max_length=150, blank=True, default="", verbose_name=_("by"))
    status = models.CharField(max_length=8, choices=GrantStatus.choices, default=GrantStatus.RUNNING,
                              verbose_name=_("status"))
    error = models.TextField(blank=True, default="", help_text=_("Why it stopped (resume it once fixed)."),
                             verbose_name=_("error"))
    # Redis's clock (ms) when this run began: a grant the script replays as claimed with a ledger entry from
    # before it was made by an earlier run of the batch (counted already_granted, never granted).
    started_ms = models.BigIntegerField(verbose_name=_("started (Redis ms)"))
    file_digest = models.CharField(max_length=64, blank=True, default="", verbose_name=_("file digest"))
    lines = models.PositiveIntegerField(default=0, help_text=_("Lines or ids read"), verbose_name=_("lines"))
    chunks = models.PositiveIntegerField(default=0, verbose_name=_("chunks"))
    chunks_done = models.PositiveIntegerField(default=0, verbose_name=_("chunks done"))
    granted = models.PositiveIntegerField(default=0, verbose_name=_("granted"))
    limit_reached = models.PositiveIntegerField(default=0, verbose_name=_("limit reached"))
    sold_out = models.PositiveIntegerField(default=0, verbose_name=_("sold out"))
    invalid = models.PositiveIntegerField(default=0, verbose_name=_("invalid"))
    duplicate = models.PositiveIntegerField(default=0, verbose_name=_("duplicate"))
    already_granted = models.PositiveIntegerField(
        default=0, help_text=_("Granted by an earlier run of the same batch (not again)"),
        verbose_name=_("already granted"))
    rejected = models.TextField(blank=True, default="", help_text=_("The invalid and duplicate lines, as CSV"),
                                verbose_name=_("rejected lines"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("grant batch")
        verbose_name_plural = _("grant batches")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["campaign", "-created_at"], name="grant_batch_latest")]
        constraints = [
            # One run of a batch at a time: another while it runs is the API's 409 (the command resumes it).
            models.UniqueConstraint(fields=["campaign", "name"], condition=Q(status="running"),
                                    name="grant_batch_one_unfinished"),
            models.CheckConstraint(condition=Q(chunks_done__lte=models.F("chunks")), name="grant_batch_progress"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.campaign_id})"

    @property
    def counts(self) -> dict[str, object]:
        """The batch's answer: docs/api.md's counts."""
        return {"batch": self.name, "granted": self.granted, "limit_reached": self.limit_reached,
                "sold_out": self.sold_out, "invalid": self.invalid, "duplicate": self.duplicate}

    @property
    def progress(self) -> float:
        return 1.0 if not self.chunks else self.chunks_done / self.chunks


class GrantChunk(models.Model):
    """Up to CHUNK_SIZE valid shopper ids of a batch run, granted in one pipeline of claim script calls."""

    batch = models.ForeignKey(GrantBatch, on_delete=models.CASCADE, related_name="chunk_rows", db_index=False,
                              verbose_name=_("batch"))
    index = models.PositiveIntegerField(verbose_name=_("index"))
    user_ids = models.TextField(help_text=_("One shopper id a line"), verbose_name=_("user ids"))
    done = models.BooleanField(default=False, verbose_name=_("done"))

    class Meta:
        verbose_name = _("grant chunk")
        verbose_name_plural = _("grant chunks")
        constraints = [models.UniqueConstraint(fields=["batch", "index"], name="grant_chunk_once")]

    def __str__(self) -> str:
        return f"{self.batch_id}.{self.index}"

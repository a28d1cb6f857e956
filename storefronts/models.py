"""Storefront clients (the web shop, the app, a mini-program) and their keys (docs/api.md, Shoppers: Storefront
keys). A key's secret signs its shoppers' tokens and is stored encrypted (storefronts/crypto.py); its api_key, for the
storefront's backend on the service routes, is stored as a SHA-256 digest only. Neither is ever shown again."""
from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy as _

CHANNEL_PATTERN = r"[a-z0-9_-]{1,32}"
KEY_ID_PATTERN = r"[A-Za-z0-9_-]{1,32}"  # core.auth.KEY_ID_RE


class Storefront(models.Model):
    name = models.CharField(max_length=100, unique=True, verbose_name=_("name"))
    channels = ArrayField(models.CharField(max_length=32), default=list, blank=True, verbose_name=_("channels"),
                          help_text=_("The sales channels its shoppers buy through (web, app), comma-separated."))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        ordering = ["name"]
        verbose_name = _("storefront")
        verbose_name_plural = _("storefronts")

    def __str__(self) -> str:
        return self.name


class StorefrontKeyQuerySet(models.QuerySet["StorefrontKey"]):
    def live(self) -> StorefrontKeyQuerySet:
        """The keys not revoked: their tokens and api_keys are accepted."""
        return self.filter(revoked_at__isnull=True)


class StorefrontKey(models.Model):
    """One key of a storefront: several may be live at once (a rotation), each revoked alone."""

    key_id = models.CharField(max_length=32, unique=True, verbose_name=_("key id"))
    storefront = models.ForeignKey(Storefront, on_delete=models.PROTECT, related_name="keys",
                                   verbose_name=_("storefront"))
    secret_encrypted = models.TextField(verbose_name=_("secret (encrypted)"))
    api_key_sha256 = models.CharField(max_length=64, unique=True, verbose_name=_("api key (SHA-256)"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))

    objects = StorefrontKeyQuerySet.as_manager()

    class Meta:
        ordering = ["storefront", "created_at"]
        verbose_name = _("storefront key")
        verbose_name_plural = _("storefront keys")
        constraints = [
            models.CheckConstraint(condition=models.Q(key_id__regex=rf"^{KEY_ID_PATTERN}\Z"),
                                   name="storefront_key_id_form"),
        ]

    def __str__(self) -> str:
        return self.key_id

"""Storefront clients in the operator's console: list, add (its first key), a new key (rotate), revoke keys.

A key's secret and api_key appear once, on the page that made them (no-store); the lists, the change form and the
history show key ids only. The database holds the secret encrypted and the api_key's digest (storefronts/crypto.py).
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from core.admin import ReadOnlyAdminMixin

from .models import Storefront, StorefrontKey
from .services import (
    IssuedKey,
    StorefrontRefused,
    channels_of,
    storefront_add,
    storefront_change,
    storefront_key_revoke,
    storefront_key_rotate,
)

ISSUED = "_storefront_issued_key"


class StorefrontForm(forms.ModelForm):
    channels = forms.CharField(required=False, label=_("channels"),
                               help_text=_("Its sales channels, comma-separated: web,app (a-z 0-9 _ -)."))

    class Meta:
        model = Storefront
        fields = ["name", "channels"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["channels"] = ",".join(self.instance.channels)

    def clean_channels(self) -> list[str]:
        try:
            return channels_of(self.cleaned_data["channels"])
        except StorefrontRefused as exc:
            raise forms.ValidationError(str(exc)) from exc


class KeyInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = StorefrontKey
    fields = ("key_id", "created_at", "revoked_at")
    readonly_fields = ("key_id", "created_at", "revoked_at")
    extra = 0


def issued_key_page(admin_site: admin.AdminSite, request: HttpRequest, storefront: Storefront,
                    issued: IssuedKey) -> HttpResponse:
    """The new key's secret and api_key, shown once: no other page ever shows them."""
    context = {**admin_site.each_context(request), "title": _("Storefront key issued"), "storefront": storefront,
               "issued": issued, "opts": Storefront._meta}
    response = TemplateResponse(request, "admin/storefronts/issued_key.html", context)
    response["Cache-Control"] = "no-store"
    return response


@admin.register(Storefront)
class StorefrontAdmin(admin.ModelAdmin):
    form = StorefrontForm
    list_display = ["name", "channel_list", "live_keys", "created_at"]
    search_fields = ["name"]
    inlines = [KeyInline]
    actions = ["issue_key"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Storefront]:
        return super().get_queryset(request).annotate(
            live_key_count=Count("keys", filter=Q(keys__revoked_at__isnull=True)))

    @admin.display(description=_("channels"))
    def channel_list(self, storefront: Storefront) -> str:
        return ", ".join(storefront.channels)

    @admin.display(description=_("live keys"), ordering="live_key_count")
    def live_keys(self, storefront: Storefront) -> int:
        return storefront.live_key_count  # type: ignore[attr-defined]

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # its keys keep it: revoke them instead

    def save_model(self, request: HttpRequest, obj: Storefront, form: forms.ModelForm, change: bool) -> None:
        if change:
            storefront_change(storefront=obj, name=obj.name, channels=obj.channels)
            return
        created, issued = storefront_add(name=obj.name, channels=obj.channels)
        obj.pk, obj.created_at = created.pk, created.created_at
        obj._state.adding, obj._state.db = False, created._state.db
        setattr(request, ISSUED, issued)

    def response_add(self, request: HttpRequest, obj: Storefront, post_url_continue: str | None = None
                     ) -> HttpResponse:
        return issued_key_page(self.admin_site, request, obj, getattr(request, ISSUED))

    @admin.action(description=_("Issue a new key (rotate: the old keys stay valid until revoked)"))
    def issue_key(self, request: HttpRequest, queryset: QuerySet[Storefront]) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, _("Choose one storefront: its new key is shown once."), messages.WARNING)
            return None
        storefront = queryset.get()
        newest = storefront.keys.order_by("-created_at").first()
        if newest is None:
            self.message_user(request, _("This storefront has no key."), messages.ERROR)
            return None
        return issued_key_page(self.admin_site, request, storefront, storefront_key_rotate(key_id=newest.key_id))


@admin.register(StorefrontKey)
class StorefrontKeyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["key_id", "storefront", "created_at", "revoked_at"]
    list_filter = ["storefront", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["key_id", "storefront__name"]
    fields = ["key_id", "storefront", "created_at", "revoked_at"]
    actions = ["revoke"]

    @admin.action(description=_("Revoke the selected keys (their tokens refused within 2 seconds)"),
                  permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[StorefrontKey]) -> HttpResponse | None:
        live = list(queryset.filter(revoked_at__isnull=True))
        if "apply" not in request.POST:
            context = {**self.admin_site.each_context(request), "title": _("Revoke storefront keys"),
                       "opts": self.model._meta, "keys": live, "queryset": queryset, "form": forms.Form(),
                       "action": "revoke", "submit": _("Revoke"),
                       "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
            return TemplateResponse(request, "admin/storefronts/revoke_confirmation.html", context)
        for key in live:
            storefront_key_revoke(key_id=key.key_id)
        self.message_user(request, ngettext("%(n)d key revoked.", "%(n)d keys revoked.", len(live)) % {"n": len(live)},
                          messages.SUCCESS)
        return None

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("storefronts.change_storefrontkey")  # type: ignore[union-attr]

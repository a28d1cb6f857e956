"""Webhooks in the operator's console: endpoints (the secret generated and shown once, on creation), the outbox's
deliveries with their attempts and answers, and a retry of dead ones.

Nothing here shows a secret after the page that created it: the change form leaves it out, and the list, the
history and the deliveries never had it.
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from core.admin import NoAddNoDeleteMixin, ReadOnlyAdminMixin

from .addresses import Refused, check_url
from .delivery import delivery_retry
from .models import Delivery, DeliveryAttempt, DeliveryState, EventType, OutboxEvent, WebhookEndpoint
from .services import event_types_of, new_secret


class EndpointForm(forms.ModelForm):
    # A URL typed without a scheme is taken as https (Django 6's default; 5.2 warns without assume_scheme).
    url = forms.URLField(max_length=500, assume_scheme="https",
                         help_text=WebhookEndpoint._meta.get_field("url").help_text)
    event_types = forms.MultipleChoiceField(choices=EventType.choices, widget=forms.CheckboxSelectMultiple,
                                            required=False, help_text=_("None ticked: every type."),
                                            label=WebhookEndpoint._meta.get_field("event_types").verbose_name)

    class Meta:
        model = WebhookEndpoint
        fields = ["url", "event_types", "active", "description"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            check_url(url)
        except Refused as exc:
            raise forms.ValidationError(exc.message) from exc
        return url

    def clean_event_types(self) -> list[str]:
        return event_types_of(self.cleaned_data["event_types"])


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = EndpointForm
    list_display = ["url", "active", "types", "created_at"]
    list_filter = ["active"]

    @admin.display(description=_("event types"))
    def types(self, endpoint: WebhookEndpoint) -> str:
        return ", ".join(endpoint.event_types)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # its deliveries keep it: deactivate it instead

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: forms.ModelForm, change: bool) -> None:
        if not change:
            obj.secret = new_secret()
        super().save_model(request, obj, form, change)

    def response_add(self, request: HttpRequest, obj: WebhookEndpoint, post_url_continue: str | None = None
                     ) -> HttpResponse:
        """Show the new endpoint's secret, once: this page is the only place it ever appears."""
        context = {**self.admin_site.each_context(request), "title": _("Webhook endpoint created"), "endpoint": obj,
                   "secret": obj.secret, "opts": self.model._meta}
        response = TemplateResponse(request, "admin/webhooks/secret_once.html", context)
        response["Cache-Control"] = "no-store"
        return response


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = ("number", "started_at", "duration_ms", "address", "status_code", "response_head", "error")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(NoAddNoDeleteMixin, admin.ModelAdmin):
    list_display = ["id", "event_type", "event_number", "endpoint", "key", "state", "attempts", "last_status",
                    "next_attempt_at", "delivered_at"]
    list_filter = ["state", "event__type", "endpoint"]
    search_fields = ["=key", "=event__id"]
    list_select_related = ["event", "endpoint"]
    readonly_fields = ("event", "endpoint", "key", "state", "attempts", "next_attempt_at", "retry_from",
                       "created_at", "delivered_at", "last_status", "last_error", "payload")
    fields = readonly_fields
    inlines = [AttemptInline]
    actions = ["retry"]

    @admin.display(description=_("type"))
    def event_type(self, delivery: Delivery) -> str:
        return delivery.event.type

    @admin.display(description=_("event"), ordering="event_id")
    def event_number(self, delivery: Delivery) -> int:
        return delivery.event_id

    @admin.display(description=_("event data"))
    def payload(self, delivery: Delivery) -> Any:
        return delivery.event.data


    @admin.action(description=_("Retry the selected dead deliveries"), permissions=["change"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        done = sum(delivery_retry(delivery=d) for d in queryset.filter(state=DeliveryState.DEAD))
        skipped = queryset.count() - done
        text = _("%(count)s dead deliveries will be sent again now") % {"count": done}
        if skipped:
            text += _("; %(count)s not dead, left alone") % {"count": skipped}
        self.message_user(request, text,
                          messages.SUCCESS if done else messages.WARNING)

    def save_model(self, request: HttpRequest, obj: Delivery, form: forms.ModelForm, change: bool) -> None:
        pass  # nothing here is edited; retries go through the action


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "type", "key", "campaign_id", "created_at"]
    list_filter = ["type"]
    search_fields = ["=key", "=campaign_id"]
    readonly_fields = ["type", "key", "campaign_id", "data", "once", "created_at"]


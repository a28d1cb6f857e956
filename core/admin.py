"""What every app's admin shares: records the console shows but never lets an operator add or delete (events,
ledgers, deliveries), or change at all."""
from __future__ import annotations

from django.http import HttpRequest


class NoAddNoDeleteMixin:
    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ReadOnlyAdminMixin(NoAddNoDeleteMixin):
    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

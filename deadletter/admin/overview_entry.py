"""The queue overview listed in the admin's index, app index and sidebar, as a
model is: Django lists registered models only, so a proxy of the queue's model
stands for the page and its list sends the viewer there."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import URLPattern, path

from deadletter.models import QueueOverview


@admin.register(QueueOverview)
class QueueOverviewAdmin(admin.ModelAdmin):
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("deadletter.view_queuedmessage")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name="{}_{}_changelist".format(*info))]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return redirect("admin:deadletter_overview")

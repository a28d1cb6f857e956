from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from django.views.i18n import JavaScriptCatalog

admin.site.site_header = _("couponrush operators")
admin.site.site_title = "couponrush"
admin.site.index_title = _("Campaigns, coupons, claims and the jobs that keep them right")

urlpatterns = [
    path("", include("storefront.urls")),  # "/" the demo storefront; "dev/demo-shopper" only with demo tokens
    path("api/v1/", include([  # one prefix: a path outside it is not tried against every API route
        path("", include("campaigns.urls")), path("", include("orders.urls")), path("", include("coupons.urls")),
        path("", include("grants.urls")),
    ])),
    path("", include("core.urls")),  # /healthz, /readyz, /metrics, /api/schema/, /api/docs/
    path("i18n/", include("django.conf.urls.i18n")),  # POST /i18n/setlang/: the language switch
    path("i18n/js/", JavaScriptCatalog.as_view(), name="javascript-catalog"),  # the storefront's strings
    path(settings.ADMIN_URL, admin.site.urls),
]

handler400 = "core.api.bad_request_view"
handler404 = "core.api.not_found_view"
handler500 = "core.api.server_error_view"

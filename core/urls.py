"""The service endpoints (config/urls.py includes them at the root, after the apps' /api/v1/): liveness,
readiness, metrics, the schema; and every other path under /api/, the contract's JSON 404 (with DEBUG on too,
where Django would answer an unmatched path with its HTML page, listing the URL patterns)."""
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from .api import not_found_view, safe_methods_only
from .health import healthz, readyz
from .metrics import metrics

urlpatterns = [
    path("healthz", safe_methods_only(healthz), name="healthz"),
    path("readyz", safe_methods_only(readyz), name="readyz"),
    path("metrics", safe_methods_only(metrics), name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    re_path(r"^api/", csrf_exempt(not_found_view)),  # last: what no app's /api/v1/ route matched
]

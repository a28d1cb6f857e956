"""The demo storefront: "/" and, only when demo tokens are allowed (decided when the URL conf is imported),
"dev/demo-shopper"."""
from django.urls import path

from .views import StorefrontView, demo_shopper, demo_tokens_allowed

urlpatterns = [path("", StorefrontView.as_view(), name="home")]
if demo_tokens_allowed():
    urlpatterns.append(path("dev/demo-shopper", demo_shopper, name="demo-shopper"))

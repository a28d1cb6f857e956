from django.conf import settings
from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from campaigns.apis import CampaignDetailApi, CampaignListApi
from core.health import healthz, readyz
from core.metrics import metrics
from coupons.apis import CouponConfirmApi, CouponRedeemApi, CouponReleaseApi, CouponReserveApi, MyCouponsApi
from orders.apis import ClaimCancelApi, ClaimDetailApi, campaign_claim
from storefront.views import storefront_urls

admin.site.site_header = "couponrush operators"
admin.site.site_title = "couponrush"
admin.site.index_title = "Campaigns, coupons, claims and the jobs that keep them right"

api = "api/v1/"
urlpatterns = [
    *storefront_urls(),  # "/" the demo storefront; "dev/demo-shopper" only when demo tokens are allowed
    path(f"{api}campaigns", CampaignListApi.as_view(), name="campaign-list"),
    path(f"{api}campaigns/<str:campaign_id>", CampaignDetailApi.as_view(), name="campaign-detail"),
    path(f"{api}campaigns/<str:campaign_id>/claim", campaign_claim, name="campaign-claim"),
    path(f"{api}claims/<str:claim_id>", ClaimDetailApi.as_view(), name="claim-detail"),
    path(f"{api}claims/<str:claim_id>/cancel", ClaimCancelApi.as_view(), name="claim-cancel"),
    path(f"{api}me/coupons", MyCouponsApi.as_view(), name="my-coupons"),
    path(f"{api}coupons/<str:code>/redeem", CouponRedeemApi.as_view(), name="coupon-redeem"),
    path(f"{api}coupons/<str:code>/reserve", CouponReserveApi.as_view(), name="coupon-reserve"),
    path(f"{api}coupons/<str:code>/confirm", CouponConfirmApi.as_view(), name="coupon-confirm"),
    path(f"{api}coupons/<str:code>/release", CouponReleaseApi.as_view(), name="coupon-release"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path(settings.ADMIN_URL, admin.site.urls),
]

handler404 = "core.api.not_found_view"
handler500 = "core.api.server_error_view"

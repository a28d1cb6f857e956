"""The storefront API's coupon routes (config/urls.py includes them under /api/v1/)."""
from django.urls import path

from .apis import CartValidateApi, CouponConfirmApi, CouponRedeemApi, CouponReleaseApi, CouponReserveApi
from .mine import MyCouponsApi

urlpatterns = [
    path("me/coupons", MyCouponsApi.as_view(), name="my-coupons"),
    path("coupons/<str:code>/redeem", CouponRedeemApi.as_view(), name="coupon-redeem"),
    path("coupons/<str:code>/reserve", CouponReserveApi.as_view(), name="coupon-reserve"),
    path("coupons/<str:code>/confirm", CouponConfirmApi.as_view(), name="coupon-confirm"),
    path("coupons/<str:code>/release", CouponReleaseApi.as_view(), name="coupon-release"),
    path("carts/validate", CartValidateApi.as_view(), name="cart-validate"),
]

"""The storefront API's claim routes (config/urls.py includes them under /api/v1/). The claim itself is answered
on the event loop by orders/door.py under the project's servers; this route is its Django view (WSGI) and its
schema."""
from django.urls import path

from .apis import CampaignClaimApi, ClaimCancelApi, ClaimDetailApi

urlpatterns = [
    path("campaigns/<str:campaign_id>/claim", CampaignClaimApi.as_view(), name="campaign-claim"),
    path("claims/<str:claim_id>", ClaimDetailApi.as_view(), name="claim-detail"),
    path("claims/<str:claim_id>/cancel", ClaimCancelApi.as_view(), name="claim-cancel"),
]

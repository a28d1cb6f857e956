"""The storefront API's campaign routes (config/urls.py includes them under /api/v1/)."""
from django.urls import path

from .apis import CampaignDetailApi, CampaignListApi

urlpatterns = [
    path("campaigns", CampaignListApi.as_view(), name="campaign-list"),
    path("campaigns/<str:campaign_id>", CampaignDetailApi.as_view(), name="campaign-detail"),
]

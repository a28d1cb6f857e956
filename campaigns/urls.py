"""The storefront API's campaign routes (config/urls.py includes them under /api/v1/)."""
from django.urls import path

from core.public_cache import public_answer

from .apis import CampaignDetailApi, CampaignListApi
from .public import live_remaining

urlpatterns = [
    path("campaigns", public_answer(CampaignListApi.as_view(), live_remaining), name="campaign-list"),
    path("campaigns/<str:campaign_id>", public_answer(CampaignDetailApi.as_view(), live_remaining),
         name="campaign-detail"),
]

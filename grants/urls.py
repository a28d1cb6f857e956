"""The grants route (config/urls.py includes it under /api/v1/)."""
from django.urls import path

from .apis import CampaignGrantApi

urlpatterns = [
    path("campaigns/<str:campaign_id>/grants", CampaignGrantApi.as_view(), name="campaign-grants"),
]

from django.contrib import admin
from django.urls import include, path

from project.demo import views as demo_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("deadletter/api/", include("deadletter.api.urls")),
    path("demo/webhook/", demo_views.webhook, name="demo-webhook"),
]

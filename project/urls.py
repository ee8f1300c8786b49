from django.contrib import admin
from django.urls import include, path

from project.demo import views as demo_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/deadletter/", include("deadletter.api.urls")),
    # The first mount, kept so existing clients keep working; the schema lists only the one above.
    path(
        "deadletter/api/",
        include(("deadletter.api.urls", "deadletter-api"), namespace="deadletter-api-old"),
    ),
    path("deadletter/", include("deadletter.urls")),  # the Prometheus endpoint
    path("demo/webhook/", demo_views.webhook, name="demo-webhook"),
]

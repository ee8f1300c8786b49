"""The REST API's routes: `path("api/deadletter/", include("deadletter.api.urls"))`."""

from django.urls import path, register_converter

from deadletter.api import archive, drain_view, redrives, schema, views
from deadletter.api.converters import QueueNameConverter

register_converter(QueueNameConverter, "dlqueue")

app_name = "deadletter-api"

urlpatterns = [
    path("queues/", views.QueueList.as_view(), name="queues"),
    # The suffixed routes first: see QueueNameConverter.
    path("queues/<dlqueue:name>/messages/", views.MessageList.as_view(), name="messages"),
    path("queues/<dlqueue:name>/drain/", drain_view.QueueDrain.as_view(), name="drain"),
    path("queues/<dlqueue:name>/", views.QueueDetail.as_view(), name="queue"),
    path("messages/", views.SearchList.as_view(), name="search"),
    path("messages/<str:key>/", views.MessageDetail.as_view(), name="message"),
    path("archive/", archive.ArchiveList.as_view(), name="archive"),
    path("archive/<str:key>/", archive.ArchiveDetail.as_view(), name="archived"),
    path("archive/<str:key>/restore/", archive.ArchiveRestore.as_view(), name="archive-restore"),
    path("redrives/", redrives.RedriveList.as_view(), name="redrives"),
    path("redrives/<str:pk>/", redrives.RedriveDetail.as_view(), name="redrive"),
    path("redrives/<str:pk>/cancel/", redrives.RedriveCancel.as_view(), name="redrive-cancel"),
    path("schema/", schema.SchemaView.as_view(), name="schema"),
    path("schema/docs/", schema.DocsView.as_view(), name="docs"),
]

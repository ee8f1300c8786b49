from django.urls import path, register_converter

from deadletter.api import views
from deadletter.urls import KeyConverter

register_converter(KeyConverter, "dlkey")

app_name = "deadletter-api"

urlpatterns = [
    path("queues/", views.QueueList.as_view(), name="queues"),
    path("queues/<str:name>/", views.QueueDetail.as_view(), name="queue"),
    path("queues/<str:name>/messages/", views.MessageList.as_view(), name="messages"),
    path("messages/<dlkey:key>/", views.MessageDetail.as_view(), name="message"),
]

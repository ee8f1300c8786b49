"""The REST API (Django REST framework): the only package that imports `rest_framework`.

Include it with `path("deadletter/api/", include("deadletter.api.urls"))`.
"""

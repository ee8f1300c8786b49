"""The REST API (Django REST framework, drf-spectacular): the only package that
imports `rest_framework`.

Mount it with `path("api/deadletter/", include("deadletter.api.urls"))`.
Modules by job: `permissions` (who may call, on which queue), `throttles`,
`parsers`, `base` (the base view, authentication, failures, `openapi`),
`fields` and `serializers` (validation and output), `views`, `archive`,
`edits`, `redrives` and `drain_view` (endpoints), `schema` (OpenAPI document and
docs page), `converters` and `urls` (routes).
"""

"""The REST API (Django REST framework, drf-spectacular): the only package that
imports `rest_framework`.

Mount it with `path("api/deadletter/", include("deadletter.api.urls"))`.
Modules by job: `access` (authentication, permissions, parsing, failures),
`fields` and `serializers` (validation and output), `jsonvalues` (the JSON
form of any CBOR value), `views` and `drain_view` (endpoints), `schema`
(OpenAPI document and docs page), `converters` and `urls` (routes).
"""

"""The local endpoint the demo webhook handler posts to."""

from __future__ import annotations

import json
import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

logger = logging.getLogger("deadletter")


@csrf_exempt
@require_POST
def webhook(request: HttpRequest) -> HttpResponse:
    """Accept a redelivered message: 200 for a JSON object, 400 otherwise."""
    try:
        payload = json.loads(request.body)
    except ValueError:
        return JsonResponse({"ok": False, "error": "body is not JSON"}, status=400)
    if not isinstance(payload, dict):
        return JsonResponse({"ok": False, "error": "body is not a JSON object"}, status=400)
    logger.info("demo webhook received subject=%s", payload.get("subject"))
    return JsonResponse({"ok": True})

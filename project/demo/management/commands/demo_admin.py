"""Create (or reset) the demo admin login and print it."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create or reset the 'admin' superuser with a fresh password and print the login."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--url", default="http://127.0.0.1:8000/admin/")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        password = secrets.token_urlsafe(12)
        user, _ = user_model.objects.get_or_create(username=options["username"])
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(
            f"Admin login: user {user.get_username()!r} password {password!r} at {options['url']}"
        )

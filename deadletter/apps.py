from django.apps import AppConfig
from django.conf import settings


class DeadletterConfig(AppConfig):
    name = "deadletter"
    label = "deadletter"
    verbose_name = "Dead letters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from deadletter import checks

        checks.register()

        if getattr(settings, "DEADLETTER_CAPTURE_TASKS", False):
            # The other way to opt in to deadletter.contrib.tasks, without its app entry.
            from deadletter.contrib.tasks import capture

            capture.install()

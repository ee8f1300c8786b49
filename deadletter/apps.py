from django.apps import AppConfig


class DeadletterConfig(AppConfig):
    name = "deadletter"
    label = "deadletter"
    verbose_name = "Dead letters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from deadletter import checks  # noqa: F401  (registers the system checks)

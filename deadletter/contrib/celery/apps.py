from django.apps import AppConfig


class DeadletterCeleryConfig(AppConfig):
    name = "deadletter.contrib.celery"
    label = "deadletter_celery"
    verbose_name = "Dead letters for Celery"

    def ready(self) -> None:
        from deadletter.contrib.celery import capture

        capture.install()

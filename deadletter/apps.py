from django.apps import AppConfig


class DeadletterConfig(AppConfig):
    name = "deadletter"
    label = "deadletter"
    verbose_name = "Dead letters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from deadletter import checks
        from deadletter.conf import conf

        checks.register()

        from deadletter import signals
        from deadletter.reports.alerts import evaluate

        signals.drain_pass_finished.connect(
            evaluate.on_drain_pass, dispatch_uid="deadletter.alerts"
        )

        if conf.CAPTURE_TASKS:
            # The other way to opt in to deadletter.contrib.tasks, without its app entry.
            from deadletter.contrib.tasks import capture

            capture.install()

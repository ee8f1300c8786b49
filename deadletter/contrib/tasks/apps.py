from django.apps import AppConfig


class DeadletterTasksConfig(AppConfig):
    name = "deadletter.contrib.tasks"
    label = "deadletter_tasks"
    verbose_name = "Dead letters for tasks"

    def ready(self) -> None:
        from deadletter.contrib.tasks import capture

        capture.install()

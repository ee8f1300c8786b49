"""QueueAccess: what a group or a user may do on the queues a pattern names."""

from __future__ import annotations

from django.conf import settings
from django.db import models

# What a rule may grant, each a boolean field of the same name.
ACTIONS = ("view", "retry", "edit", "delete", "redrive")


class QueueAccess(models.Model):
    """What a group or a user may do on the queues whose names match `queues` (a
    shell-style pattern, `billing.*`). Once any row exists, a user who is not a
    superuser sees and acts on only the queues a row grants them, and only with
    the matching model permission too (`queue.access`); with none, the model
    permissions alone apply."""

    id = models.BigAutoField(primary_key=True)
    group = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    queues = models.CharField(max_length=255, help_text="A shell-style pattern: billing.*")
    view = models.BooleanField(default=True)
    retry = models.BooleanField(default=False)
    edit = models.BooleanField(default=False)
    # Named as the action it grants, so this field hides `Model.delete()` on an
    # instance: a rule is deleted through a queryset (the admin does), and a user's
    # or a group's deletion cascades through one.
    delete = models.BooleanField(default=False)  # type: ignore[assignment]
    redrive = models.BooleanField(default=False)

    class Meta:
        app_label = "deadletter"
        ordering = ["queues", "id"]
        verbose_name = "queue access"
        verbose_name_plural = "queue access"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(group__isnull=False, user__isnull=True)
                | models.Q(group__isnull=True, user__isnull=False),
                name="deadletter_queueaccess_one_holder",
            )
        ]

    def __str__(self) -> str:
        holder = f"group {self.group}" if self.group_id else f"user {self.user}"
        granted = [action for action in ACTIONS if getattr(self, action)]
        return f"{holder} on {self.queues}: {', '.join(granted) or 'nothing'}"

"""A Celery task that fails for good, for the demo: it charges a card through a
payment provider that is down, retrying twice before it gives up."""

from celery import shared_task


@shared_task(autoretry_for=(ConnectionError,), max_retries=2, default_retry_delay=0)
def charge_card(order_id: int, amount_cents: int, currency: str = "EUR") -> None:
    raise ConnectionError(f"payments.example.com refused order {order_id}: 503 Service Unavailable")

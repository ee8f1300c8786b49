"""A package whose `tasks` module only Celery's autodiscovery imports (no test does)."""

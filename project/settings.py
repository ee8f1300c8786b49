"""Settings of the demo project; also the settings the test suite runs under.

`DATABASE_URL` picks the database (SQLite file beside manage.py when unset);
everything else is fixed so a fresh clone serves without configuration.
"""

import os
import tempfile
from pathlib import Path

import dj_database_url

from deadletter.wire.messages import GO_EVENT_CODES

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "deadletter-demo-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "deadletter",
    "deadletter.contrib.celery",
    "project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"

SQLITE_PATH = Path(os.environ.get("DEADLETTER_SQLITE_PATH", BASE_DIR / "db.sqlite3"))

DATABASES = {
    "default": dj_database_url.parse(os.environ.get("DATABASE_URL") or f"sqlite:///{SQLITE_PATH}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets readers run beside the one writer; the busy timeout makes a
        # second writer wait instead of failing with "database is locked".
        # mmap reads index pages without a copy each: the API's queue list counts
        # a million keys in tens of ms with it (docs/measured.md).
        "init_command": (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA mmap_size=268435456;"
        ),
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
    }
    # A file, not :memory:, so that subprocess tests share the test database;
    # one per test run, so that runs side by side do not share it.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get(
            "DEADLETTER_TEST_SQLITE_PATH",
            str(Path(tempfile.gettempdir()) / f"deadletter-test-{os.getpid()}.sqlite3"),
        ),
    }

else:
    # One test database per run, so that runs side by side do not share it.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get(
            "DEADLETTER_TEST_DB_NAME", f"test_{DATABASES['default']['NAME']}_{os.getpid()}"
        ),
    }
    if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
        # utf8mb4 holds any text a message carries (MySQL's "utf8" does not).
        DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4"}
        DATABASES["default"]["TEST"]["CHARSET"] = "utf8mb4"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"deadletter": {"handlers": ["console"], "level": "INFO"}},
}

REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
}

DEADLETTER_HANDLERS = {
    "webhook-queue": "project.demo.handlers.post_to_local_endpoint",
    "telegram-queue": "project.demo.handlers.log_only",
    "discord-queue": "project.demo.handlers.log_only",
    # Failed Celery tasks of the default queue (deadletter.contrib.celery): sent back
    # to it by name; a worker (`celery -A project worker`) then runs them.
    "celery.celery": "deadletter.contrib.celery.redrive",
}

# The demo's messages are the Go program's, so they show its names for the codes;
# a project of its own names its codes, or sees numbers.
DEADLETTER_EVENT_CODES = GO_EVENT_CODES

# The Prometheus endpoint (/deadletter/metrics) answers the demo with this token.
DEADLETTER_METRICS_TOKEN = os.environ.get("DEADLETTER_METRICS_TOKEN", "demo-metrics-token")

# Where the demo webhook handler redelivers to: the demo site's own endpoint.
DEMO_WEBHOOK_URL = os.environ.get("DEMO_WEBHOOK_URL", "http://127.0.0.1:8000/demo/webhook/")

# Celery (project/celery.py reads these): a worker runs `celery -A project worker`;
# the demo needs none, its failing task runs in-process.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
CELERY_TASK_DEFAULT_QUEUE = "celery"

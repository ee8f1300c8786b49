"""manage.py deadletter_stats: the reports' figures as a table, JSON or Prometheus."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from prometheus_client.parser import text_string_to_metric_families

from deadletter.management.commands.deadletter_stats import age, duration
from deadletter.queue import settlements
from tests.factories import park, park_aged

pytestmark = pytest.mark.django_db(transaction=True)


def stats(*args: str) -> str:
    out = StringIO()
    call_command("deadletter_stats", *args, stdout=out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def limits(settings) -> None:
    settings.DEADLETTER_MAX_QUEUE_AGE = timedelta(days=30)
    settings.DEADLETTER_EXPIRY_WARNING = None


def test_the_table_has_a_row_a_queue_and_totals() -> None:
    park_aged("mail", days_ago=29.5, seq=1, attempts=3)
    park_aged("mail", days_ago=1, seq=2)
    park_aged("hooks", days_ago=0.5, seq=1)
    settlements.drop_msg(park_aged("hooks", days_ago=0.1, seq=2), None, "max_attempts")
    lines = stats().splitlines()
    assert lines[0].split()[:5] == ["queue", "depth", "oldest", "parked", "oldest"]
    assert "expiring <1d 00h" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["mail"][1] == "2"
    assert rows["mail"][2:4] == ["29d", "12h"]
    assert rows["hooks"][1] == "1"
    assert rows["TOTAL"][1] == "3"
    assert rows["TOTAL"][-1] == "1"  # max attempts drops
    attempts = {line.split()[0]: line.split() for line in lines[5:]}
    assert attempts["attempts"][1:] == ["0", "1", "2", "3", "4-5", "6-10", "11+", "rows", "read"]
    assert attempts["mail"][1:] == ["1", "0", "0", "1", "0", "0", "0", "2"]


def test_json_is_the_stats_dict() -> None:
    park_aged("mail", days_ago=29.5, seq=1)
    data = json.loads(stats("--format", "json", "--horizon", "12h"))
    assert data["horizon_seconds"] == 43_200
    assert data["queues"][0]["queue"] == "mail"
    assert data["queues"][0]["expiring"] == 1
    assert data["totals"]["depth"] == 1
    assert data["warned"] == 0


def test_prometheus_format_parses() -> None:
    park_aged("mail", days_ago=2, seq=1)
    families = {f.name: f for f in text_string_to_metric_families(stats("--format", "prometheus"))}
    [depth] = families["deadletter_queue_depth"].samples
    assert (depth.labels, depth.value) == ({"queue": "mail"}, 1)


def test_only_the_chosen_queues() -> None:
    park_aged("mail", days_ago=2, seq=1)
    park_aged("hooks", days_ago=2, seq=1)
    data = json.loads(stats("--format", "json", "--queue", "hooks"))
    assert [q["queue"] for q in data["queues"]] == ["hooks"]


def test_attempts_sample_all_reads_every_row() -> None:
    for i in range(5):
        park_aged("mail", days_ago=2, seq=i)
    data = json.loads(stats("--format", "json", "--attempts-sample", "2"))
    assert data["queues"][0]["attempts_rows"] == 2
    data = json.loads(stats("--format", "json", "--attempts-sample", "all"))
    assert data["queues"][0]["attempts_rows"] == 5


@pytest.mark.parametrize(
    "args", [["--horizon", "3 weeks"], ["--attempts-sample", "-1"], ["--format", "xml"]]
)
def test_bad_arguments_are_usage_errors(args: list[str]) -> None:
    with pytest.raises(CommandError):
        stats(*args)


def test_the_warning_setting_warns_once(settings) -> None:
    settings.DEADLETTER_EXPIRY_WARNING = timedelta(days=1)
    park_aged("mail", days_ago=29.5, seq=1)
    assert "Warned about 1 message(s)" in stats()
    assert "Warned" not in stats()


def test_durations_and_ages_read_and_print_as_people_write_them() -> None:
    assert duration("3d") == timedelta(days=3)
    assert duration("90s") == timedelta(seconds=90)
    assert duration("1.5h") == timedelta(minutes=90)
    assert [age(None), age(42), age(250), age(3 * 3600 + 60), age(2 * 86400 + 3600)] == [
        "-",
        "42s",
        "4m 10s",
        "3h 01m",
        "2d 01h",
    ]


def test_an_unknown_queue_is_a_command_error_naming_it() -> None:
    park_aged("mail", days_ago=1)
    with pytest.raises(CommandError, match="no queue 'nope'") as refused:
        stats("--queue", "mail", "--queue", "nope")
    assert refused.value.returncode == 2  # as the drain's for the same name


def test_a_queue_with_a_handler_but_no_row_is_known(settings) -> None:
    settings.DEADLETTER_HANDLERS = {"quiet": "tests.factories.ok_handler"}
    assert stats("--queue", "quiet").splitlines()[1].split()[:2] == ["quiet", "0"]


def test_the_output_and_its_statements_stay_the_same_at_3000_queues() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.reports.many_queues import park_one_row_queues

    def run() -> tuple[int, list[str]]:
        with CaptureQueriesContext(connection) as ctx:
            out = stats("--limit", "5")
        return len(ctx.captured_queries), out.splitlines()

    park_one_row_queues(20)
    few_queries, few = run()
    park_one_row_queues(3000, prefix="spam-x")
    many_queries, many = run()
    assert many_queries == few_queries
    assert len(many) == len(few)
    others = [line for line in many if line.startswith("(other queues)")]
    assert others[0].split()[2] == str(3020 - 5)
    assert [line.split()[1] for line in many if line.startswith("TOTAL")][0] == "3020"


def test_stats_say_how_many_rows_wait_for_the_search_index() -> None:
    park("waiting")
    out = StringIO()
    call_command("deadletter_stats", "--format", "json", stdout=out)
    assert json.loads(out.getvalue())["search_pending"] == 1
    out = StringIO()
    call_command("deadletter_stats", stdout=out)
    assert "1 row(s) wait for the search index" in out.getvalue()

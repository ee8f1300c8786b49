"""No private attribute of an object that is not ours is read or written anywhere in
`deadletter/` (migrations included): what Django, the standard library or another
package keeps behind an underscore may change in any release without a word.

A name is ours when `deadletter/` defines it (a function, class, variable, argument,
import alias, module, or an attribute it assigns); a handful of underscore names
that their projects document as public are listed with where. A write is a
foreign one when it puts an underscore attribute Django or the standard library
reads themselves on an object other than `self` or `cls` (`view._non_atomic_requests
= ...`: a private mark to make Django behave); a note of our own on a model instance
(`obj._decoded = ...`) is a name neither of them uses.
"""

from __future__ import annotations

import ast
import re
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

import django

from tests.factories import REPO

PACKAGE = REPO / "deadletter"

DOCUMENTED = {
    "_meta": "Django's Model _meta API (docs/ref/models/meta)",
    "_exit": "os._exit, in the os module's documentation",
    "_value_": "enum's supported _sunder_ names (the enum HOWTO)",
    "_get_current_object": "Celery's documented way from current_app to the app itself",
    "_asdict": "namedtuple's documented methods",
    "_replace": "namedtuple's documented methods",
    "_fields": "namedtuple's documented attributes",
    "_make": "namedtuple's documented methods",
}
"""Underscore names their projects document as public API, and where."""

LOOKUPS = {"getattr", "hasattr", "setattr", "delattr"}
BYPASSES = {"__getattribute__"}
"""Called as `object.__getattribute__(obj, ...)`, it reads past the object's own
attribute lookup (a lazy proxy's, for one): a private way in."""


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sources(root: Path = PACKAGE) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def own_names(trees: Iterable[ast.Module], root: Path = PACKAGE) -> set[str]:
    """Every underscore name `deadletter/` defines itself."""
    found = {p.stem for p in root.rglob("_*") if is_private(p.stem)}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                found.add(node.attr)
            elif isinstance(node, ast.arg):
                found.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                found.add(node.asname)
    return {name for name in found if is_private(name)}


def private_reads(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """`(line, name)` of every read of an underscore attribute, by `obj._name` or by
    `getattr(obj, "_name")` and its kin, and of every `__getattribute__` call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            if is_private(node.attr) or node.attr in BYPASSES:
                yield node.lineno, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in LOOKUPS
            and len(node.args) >= 2
        ):
            name = node.args[1]
            text = name.value if isinstance(name, ast.Constant) else None
            if isinstance(text, str) and is_private(text):
                yield node.lineno, text


def private_writes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """`(line, name)` of every write of an underscore attribute on an object other
    than `self` or `cls`: `obj._name = ...`, `del obj._name`, and `setattr(obj,
    "_name", ...)` and `delattr`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if is_private(node.attr):
                yield node.lineno, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
        ):
            name = node.args[1]
            text = name.value if isinstance(name, ast.Constant) else None
            if isinstance(text, str) and is_private(text):
                yield node.lineno, text


THEIRS = (Path(django.__file__).parent, Path(sysconfig.get_path("stdlib")))
"""Django's and the standard library's sources: an underscore attribute they use
themselves is theirs."""


def used_by_theirs(names: set[str], roots: Iterable[Path] = THEIRS) -> set[str]:
    """Those of `names` that Django or the standard library use as an attribute
    (`x._name`, or `"_name"` given to `getattr` and its kin)."""
    if not names:
        return set()
    alternatives = "|".join(re.escape(name) for name in sorted(names))
    pattern = re.compile(rf"\.({alternatives})\b|[\"']({alternatives})[\"']")
    found: set[str] = set()
    for root in roots:
        for path in root.rglob("*.py"):
            if "site-packages" in path.parts and root.name != "django":
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found.update(a or b for a, b in pattern.findall(text))
    return found


def foreign_writes(
    parsed: list[tuple[Path, ast.Module]], roots: Iterable[Path] = THEIRS
) -> list[tuple[Path, int, str]]:
    written = [(path, line, name) for path, tree in parsed for line, name in private_writes(tree)]
    theirs = used_by_theirs({name for _path, _line, name in written}, roots)
    return [(path, line, name) for path, line, name in written if name in theirs]


def foreign_reads(
    parsed: list[tuple[Path, ast.Module]], own: set[str]
) -> list[tuple[Path, int, str]]:
    return [
        (path, line, name)
        for path, tree in parsed
        for line, name in private_reads(tree)
        if name not in own and name not in DOCUMENTED
    ]


def test_deadletter_reads_no_private_attribute_that_is_not_its_own() -> None:
    parsed = list(sources())
    assert len(parsed) > 100  # the whole package, migrations and their frozen copy too
    assert any("migrations" in path.parts for path, _tree in parsed)
    found = foreign_reads(parsed, own_names(tree for _path, tree in parsed))
    assert [f"{p.relative_to(REPO)}:{line}: {name}" for p, line, name in found] == []


def test_deadletter_writes_no_private_attribute_django_or_the_stdlib_reads() -> None:
    """Django's private marks (`_non_atomic_requests`, `_csrf_exempt`...) are set
    through their public decorators, never written by hand."""
    parsed = list(sources())
    found = foreign_writes(parsed)
    assert [f"{p.relative_to(REPO)}:{line}: {name}" for p, line, name in found] == []


def test_the_check_finds_the_writes_it_is_there_for(tmp_path: Path) -> None:
    """A private mark written onto a Django view, by assignment or `setattr`, is
    found (deadletter/drain/web.py once did it); our own notes on an object, and
    anything on `self`, are not."""
    module = tmp_path / "example.py"
    module.write_text(
        "def mark(view, obj):\n"
        "    view._non_atomic_requests = {'default'}\n"
        "    setattr(view, '_non_atomic_requests', set())\n"
        "    obj._decoded_here = None\n"
        "    return view\n"
        "class Ours:\n"
        "    def __init__(self):\n"
        "        self._non_atomic_requests = set()\n",
        encoding="utf-8",
    )
    found = foreign_writes(list(sources(tmp_path)))
    assert [(line, name) for _p, line, name in sorted(found)] == [
        (2, "_non_atomic_requests"),
        (3, "_non_atomic_requests"),
    ]


def test_the_check_finds_the_reads_it_is_there_for(tmp_path: Path) -> None:
    """The reads the statement path once made (issue 33) are found; our own
    underscore names, and names assigned before they are read, are not."""
    module = tmp_path / "example.py"
    module.write_text(
        "import asyncio\n"
        "from django.conf import settings\n"
        "_read_settings = object.__getattribute__(settings, '__dict__')\n"
        "_running_loop = asyncio._get_running_loop\n"
        "def route(connection):\n"
        "    first = connection.atomic_blocks[0]._from_testcase\n"
        "    return all(getattr(b, '_from_testcase', False) for b in connection.atomic_blocks)\n"
        "def _ours(obj):\n"
        "    obj._noted = _read_settings\n"
        "    return obj._noted, _ours, obj.__dict__, obj._meta\n",
        encoding="utf-8",
    )
    parsed = list(sources(tmp_path))
    found = foreign_reads(parsed, own_names((tree for _p, tree in parsed), tmp_path))
    assert [(line, name) for _p, line, name in sorted(found)] == [
        (3, "__getattribute__"),
        (4, "_get_running_loop"),
        (6, "_from_testcase"),
        (7, "_from_testcase"),
    ]

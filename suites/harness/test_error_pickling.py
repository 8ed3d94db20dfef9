"""Every exception class of `mapper_impl`, `harness` and `reports` survives pickling: a load run
in a process pool (or any child that hands its failure back through ``multiprocessing``) must
give the parent the same error, with its attributes, and never "missing 1 required positional
argument" from the unpickling of an error whose ``__init__`` takes more than its message.

The classes are found on the source (any class deriving, directly or through another class of
the project, from an exception), so a new one is checked without being listed here; each is
built with a non-default value for every parameter, keyword-only ones included.
"""

from __future__ import annotations

import ast
import builtins
import concurrent.futures
import importlib
import inspect
import pickle
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mapper_impl", "harness", "reports")
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _base_names(node: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}


def exception_classes() -> list[tuple[str, str]]:
    """(module, class name) of every exception class the packages define at module level."""
    defined: dict[tuple[str, str], set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef):
                    defined[(module, node.name)] = _base_names(node)
    exceptions = set(BUILTIN_EXCEPTIONS)
    while True:  # the closure: a class deriving from an exception class of the project is one
        more = {name for (_, name), bases in defined.items() if bases & exceptions} - exceptions
        if not more:
            break
        exceptions |= more
    return sorted(key for key, bases in defined.items() if bases & exceptions)


def _sample(parameter: inspect.Parameter):
    """A value for ``parameter`` unlike its default, by its annotation."""
    hint = str(parameter.annotation)
    if "tuple" in hint:
        return (ValueError("first"), KeyError("second"))
    if "int" in hint:
        return 7
    if "float" in hint:
        return 2.5
    if "Path" in hint:
        return Path("some") / "run"
    return f"text of {parameter.name}"


def build(cls: type) -> BaseException:
    """An instance with a non-default value for every parameter of its ``__init__``."""
    positional, keywords = [], {}
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.kind is parameter.KEYWORD_ONLY:
            keywords[parameter.name] = _sample(parameter)
        else:
            positional.append(_sample(parameter))
    if cls.__init__ is BaseException.__init__:  # (*args): one message
        positional = ["what went wrong"]
    return cls(*positional, **keywords)


def _same(a: object, b: object) -> bool:
    if isinstance(a, BaseException):
        return type(a) is type(b) and a.args == b.args and _same(vars(a), vars(b))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_the_finder_finds_the_error_trees():
    """The test below would pass vacuously if the source scan missed the classes."""
    found = exception_classes()
    for expected in (
        ("mapper_impl._common", "FileCheckError"),
        ("mapper_impl._common", "FileMissingError"),  # through FileCheckError, not a builtin base
        ("mapper_impl._common", "ContextLoadError"),
        ("mapper_impl._winapi", "Win32Error"),
        ("harness.core.errors", "RunFailed"),
        ("harness.core.errors", "RegistryUnreachable"),
    ):
        assert expected in found
    assert len(found) >= 25, found


@pytest.mark.parametrize("module, name", exception_classes(), ids=lambda v: v)
def test_every_error_survives_pickling(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, BaseException)
    error = build(cls)
    error.extra = "set after raising"  # attributes added later (RunFailed.out is) travel too
    for protocol in range(pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert type(copy) is cls
        assert str(copy) == str(error)
        assert _same(copy, error), (vars(copy), vars(error))


def test_a_load_in_a_process_pool_hands_back_its_error(tmp_path):
    """What pickling is for: the parent of a pool gets the child's FileMissingError whole."""
    from mapper_impl import load_weights
    from mapper_impl._common import FileMissingError

    missing = tmp_path / "no-such-weights.bin"
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        with pytest.raises(FileMissingError) as caught:
            pool.submit(load_weights, str(missing)).result(timeout=120)
    assert caught.value.path == str(missing) and caught.value.reason == "no such file"

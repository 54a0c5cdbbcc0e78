"""`--press SPEC`: a KV-cache press, kvpress's or the project's, parsed without running code.

SPEC is a press as a kvpress user writes it in Python,
`ChunkKVPress(press=SnapKVPress(compression_ratio=0.5), chunk_length=8)`: a call of a press
class with keyword arguments whose values are literals (numbers, strings, booleans, None,
tuples and lists of them) or nested presses. It is read with `ast` and built from the
classes themselves; nothing in it is evaluated. The class names are kvpress's exports (its
`*Press` classes, where kvpress is installed) and the project's own (`probe.presses`).

`prefill(model, press, ids)` applies a press as kvpress's pipeline does: the context
prefilled inside `with press(model):` (the hooks cut each layer's cache once it is filled),
and whatever comes after (the question, the answer) run outside it, at positions that go
on from the context's length, reading the cut cache.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib.metadata
import inspect
import warnings
from dataclasses import dataclass

from weakspots.errors import ConfigError

from .presses import PRESSES

KVPRESS_INSTALL = "pip install weakspots[kvpress], in a venv of its own: it pins transformers < 5.3"


@dataclass(frozen=True)
class PressSpec:
    """A parsed SPEC: `text` (canonical, `ast.unparse` of the call), `press` (the built
    object), `library` (`kvpress X.Y.Z` where any class is kvpress's, else `weakspots`)."""

    text: str
    press: object
    library: str

    @property
    def identity(self) -> dict:
        return {"press": self.text, "press_library": self.library}


@functools.cache
def kvpress_classes() -> dict[str, type] | None:
    """kvpress's press classes by name (None where kvpress is not installed)."""
    try:
        # kvpress imports `fire`, which imports the deprecated `pipes`
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import kvpress
    except ImportError:
        return None
    base = kvpress.BasePress
    return {
        name: getattr(kvpress, name)
        for name in dir(kvpress)
        if name.endswith("Press") and isinstance(getattr(kvpress, name), type)
        and issubclass(getattr(kvpress, name), base)
    }  # fmt: skip


def kvpress_version() -> str | None:
    try:
        return importlib.metadata.version("kvpress")
    except importlib.metadata.PackageNotFoundError:
        return None


def _arguments(cls) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    return [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]


def _near(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else ""


def parse_press(spec: str) -> PressSpec:
    """The press SPEC names (module docstring); ConfigError('press', ...) for a bad one."""
    try:
        tree = ast.parse(str(spec).strip(), mode="eval").body
    except SyntaxError as error:
        raise ConfigError("press", f"not a press call ({error.msg}): {spec!r}") from None
    used: list[bool] = []
    press = _build(tree, used)
    version = kvpress_version()
    library = f"kvpress {version}" if any(used) else "weakspots"
    return PressSpec(ast.unparse(tree), press, library)


def _build(node, used: list[bool]):
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ConfigError("press", f"expected a press call such as SnapKVPress(compression_ratio=0.5), "
                                   f"got {ast.unparse(node)!r}")  # fmt: skip
    name = node.func.id
    kvpress = kvpress_classes()
    if name in PRESSES:
        cls = PRESSES[name]
    elif kvpress is not None and name in kvpress:
        cls = kvpress[name]
        used.append(True)
    else:
        known = sorted(PRESSES) + sorted(kvpress or ())
        hint = "" if kvpress is not None else f" (kvpress is not installed: {KVPRESS_INSTALL})"
        raise ConfigError("press", f"unknown press {name!r}{_near(name, known)}{hint}")
    if node.args:
        raise ConfigError("press", f"{name}: give arguments by name (name=value), "
                                   f"not by position: {ast.unparse(node)!r}")  # fmt: skip
    allowed = _arguments(cls)
    kwargs = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ConfigError("press", f"{name}: no **arguments, name each one")
        if keyword.arg not in allowed:
            raise ConfigError("press", f"{name} has no argument {keyword.arg!r}{_near(keyword.arg, allowed)} "
                                       f"(its arguments: {', '.join(allowed)})")  # fmt: skip
        kwargs[keyword.arg] = _value(keyword.value, used)
    try:
        return cls(**kwargs)
    except ConfigError as error:
        raise ConfigError("press", f"{name}: {error.message}") from None
    except Exception as error:  # kvpress checks its arguments with asserts and TypeErrors
        raise ConfigError("press", f"{name}({_render(kwargs)}) is refused by {cls.__module__}: "
                                   f"{type(error).__name__}: {error}") from None  # fmt: skip


def _value(node, used: list[bool]):
    if isinstance(node, ast.Call):
        return _build(node, used)
    if isinstance(node, ast.Tuple | ast.List):
        values = [_value(item, used) for item in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ConfigError(
            "press", f"an argument must be a literal or a press, got {ast.unparse(node)!r}"
        ) from None


def _render(kwargs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def cache_argument(module) -> str:
    """The name a model's forward takes its cache by (`cache` in recent transformers)."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def prefill(model, press, ids):
    """The context `ids` `(1, T)` prefilled under `press` (module docstring); returns the cut cache."""
    from transformers import DynamicCache

    cache = DynamicCache()
    inner = model.model
    with press(model):
        inner(input_ids=ids, **{cache_argument(inner): cache}, use_cache=True)
    return cache

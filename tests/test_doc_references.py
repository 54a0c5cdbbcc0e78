"""The documents name code that exists: every dotted name of the package (`theory.escape`,
`weakspots.sims.decoder.train.first_query_hits`, `idealized.decoder.config.V4Switches`) and
every `tests/...py` path mentioned in docs/*.md, README.md and DEVELOPERS.md.

A dotted name is checked by importing its longest module prefix under `weakspots.` and
reading the rest as attributes; `theory.induction_*` asks for some attribute with that
prefix. A file name (`docs/theory.md`, `sims/decoder/train.py`) is not a dotted name.
docs/performance.md's dated log may keep a name it measured under, on a line that says
what it became: "`old` (since moved to `new`)", "(since renamed to ...)", "(since split
into `a`, `b` and `c`)", each new name existing.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "DEVELOPERS.md"]
PACKAGES = ("theory", "sims", "idealized", "probe", "interop", "figures", "benchmarks", "cli")
DOTTED = re.compile(
    r"(?<![\w./-])((?:weakspots\.)?(?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)(\*?)"
)
FILE_SUFFIXES = {"md", "py", "json", "toml", "csv", "txt", "png", "pdf", "npz"}
TEST_PATH = re.compile(r"(?<![\w./-])(tests/[\w/]+\.py)")
SINCE = re.compile(r"\(since (?:moved|renamed|split) (?:to|into) ([^)]*)\)")
HISTORICAL = ROOT / "docs" / "performance.md"


def exists(name: str, prefix: bool = False) -> bool:
    """`weakspots.<name>` (or `name` when it starts with `weakspots.`) imports or is an
    attribute of what imports; with `prefix`, some attribute starts with its last part."""
    parts = name.split(".")
    if parts[0] != "weakspots":
        parts = ["weakspots", *parts]
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        rest = parts[i:]
        if prefix and rest:
            rest, stem = rest[:-1], rest[-1]
        else:
            stem = None
        for attr in rest:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return stem is None or any(a.startswith(stem) for a in dir(obj))
    return False


def mentions(path: Path):
    """`(line number, name, is a prefix, line)` of every dotted name in `path`."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in DOTTED.finditer(line):
            name = match.group(1)
            if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES:
                yield number, name, bool(match.group(2)), line


def historical(line: str) -> bool:
    """The line says what its old name became ("(since moved to `new`)"), each new name existing."""
    said = SINCE.search(line)
    if said is None:
        return False
    new = [m.group(1) for m in DOTTED.finditer(said.group(1))]
    return bool(new) and all(exists(name) for name in new)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_dotted_name_exists(document):
    missing = [
        f"{document.name}:{number}: {name}"
        for number, name, prefix, line in mentions(document)
        if not exists(name, prefix) and not (document == HISTORICAL and historical(line))
    ]
    assert not missing, "names no module or attribute has:\n" + "\n".join(missing)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_test_path_exists(document):
    paths = TEST_PATH.findall(document.read_text())
    missing = [path for path in paths if not (ROOT / path).exists()]
    assert not missing, f"{document.name} names test files that do not exist: {missing}"


def test_the_check_finds_a_dead_name():
    assert exists("theory.escape.escape_fraction_discrete")
    assert exists("theory.induction_", prefix=True)
    assert not exists("theory._sigmoid")
    assert not exists("theory.noise.escape_fraction_discrete")
    assert not exists("idealized.decoder.model.make_v4_attention")
    assert historical(
        "`theory.noise` (since split into `theory.escape` and `theory.gradient_noise`)"
    )
    assert not historical("`theory.noise` (since split into `theory.noise_moments`)")

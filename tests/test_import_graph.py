"""Dependencies point down: the package's import graph, read from the source with `ast`.

Every import counts, at module level or inside a function (an import moved into a
function to dodge a cycle is still the cycle). `import weakspots.a.b` is an edge to
`weakspots.a.b` (not to its parents); `from weakspots.a import b` to the submodule
`weakspots.a.b` when there is one, else to `weakspots.a`; relative imports are resolved;
imports under `if TYPE_CHECKING:` are left out (they never run). The modules are those
pyproject installs (its packages and package-dir), so the test reads no module's code.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
CLI = "weakspots.cli"
# Entry points that run the command line as a program: they sit above it.
PROGRAMS = {"weakspots.__main__"}


def _folder(package: str) -> Path:
    """The repository folder of installed package `package` (pyproject's package-dir)."""
    mapping = SETUPTOOLS["package-dir"]
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in mapping:
            return ROOT / mapping[head] / Path(*parts[i:])
    raise AssertionError(f"{package} has no package-dir entry")


def modules() -> dict[str, Path]:
    """Every installed module's dotted name and source file (a package as its __init__)."""
    out = {}
    for package in SETUPTOOLS["packages"]:
        folder = _folder(package)
        for path in sorted(folder.glob("*.py")):
            out[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """The Import / ImportFrom nodes of `tree`, anywhere but under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str, known) -> str | None:
    """`name`, or the longest of its prefixes that is a module (`weakspots.theory.f` -> the package)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return ".".join(parts[:i])
    return None


def graph() -> dict[str, set[str]]:
    """Module -> the weakspots modules it imports."""
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in known else source)
            for target in targets:
                if target == "weakspots" or target.startswith("weakspots."):
                    found = _known(target, known)
                    if found is not None and found != name:
                        edges[name].add(found)
        edges.setdefault(name, set())
    return dict(edges)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def _in_cli(name: str) -> bool:
    return name == CLI or name.startswith(CLI + ".")


def test_the_graph_reads_every_installed_module():
    edges = graph()
    assert CLI in edges and f"{CLI}.parser" in edges and "weakspots.theory" in edges
    # `from weakspots import validation as check`: the submodule; `from weakspots import
    # __version__`: the package
    assert "weakspots.validation" in edges["weakspots.idealized.decoder.config"]
    assert "weakspots" in edges[CLI]
    # a function-local import counts (sims.toy.flow imports TrainConfig inside a function)
    local = "weakspots.sims.toy.flow"
    assert "weakspots.idealized.toy.config" in edges[local]
    # relative imports resolve: the command line's verbs read `from . import common`
    assert f"{CLI}.common" in edges[f"{CLI}.predict"]
    assert sum(len(v) for v in edges.values()) > 500


def test_nothing_below_the_command_line_imports_it():
    edges = graph()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        if not _in_cli(module) and module not in PROGRAMS
        for target in targets
        if _in_cli(target)
    )
    assert not upward, "modules below the command line import it:\n" + "\n".join(upward)


# The layers, bottom first; a module may import its own layer's modules and lower layers'.
LAYERS = (
    ("weakspots.errors",),
    ("weakspots.validation",),
    ("weakspots.idealized",),
    ("weakspots.theory",),
    ("weakspots.sims.store", "weakspots.sims.progress", "weakspots.sims.schedule"),
    ("weakspots.sims.toy", "weakspots.sims.decoder", "weakspots.sims.induction",
     "weakspots.sims.pretrain"),  # the families, and their engines
    ("weakspots.sims.sweep", "weakspots.sims.experiments"),  # above every family
    ("weakspots.interop", "weakspots.probe", "weakspots.figures", "weakspots.benchmarks",
     "weakspots.examples"),
    (CLI,),
)  # fmt: skip


def _layer(name: str) -> int | None:
    for rank, packages in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in packages):
            return rank
    return None  # the package's own __init__ and __main__ (the program)


def test_every_import_points_down_the_layers():
    edges = graph()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        for target in targets
        if _layer(module) is not None
        and _layer(target) is not None
        and _layer(target) > _layer(module)
    )
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


STUDIES = "weakspots.sims.experiments.decoder"


def _study(name: str) -> str | None:
    """The decoder study package `name` belongs to (`...decoder.<study>`), or None."""
    parts = name.split(".")
    prefix = STUDIES.split(".")
    if parts[: len(prefix)] != prefix or len(parts) < len(prefix) + 2:
        return None  # the family's own modules (prefetch, above the studies) and __init__
    return ".".join(parts[: len(prefix) + 1])


def test_a_decoder_study_imports_no_other_study():
    """A study's store key digests its own package (`Experiment.study`), so the code its
    experiments run beyond the engine must lie in that package: no study imports another."""
    edges = graph()
    studies = {_study(m) for m in edges} - {None}
    assert len(studies) >= 5, studies
    across = sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        for target in targets
        if _study(module) and _study(target) and _study(module) != _study(target)
    )
    assert not across, "a study imports another:\n" + "\n".join(across)


def test_every_experiment_of_a_decoder_study_is_keyed_by_its_own_package():
    from weakspots.sims.experiments import EXPERIMENTS

    for e in EXPERIMENTS:
        if e.name.startswith("lm_"):
            assert e.study is not None and e.study.startswith(STUDIES + "."), e.name
            assert _study(e.study + ".x") == e.study, e.name


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_cycles_finds_a_cycle_and_only_cycles():
    """The search itself, on small graphs with known answers."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []
    assert sorted(cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}})) == [
        ["a", "b"],
        ["c", "d"],
    ]

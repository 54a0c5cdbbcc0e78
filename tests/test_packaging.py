"""Packaging: the wheel holds every module under `weakspots/`, and a user's own `theory/`
or `sims/` beside a script shadows nothing (from the wheel or from the source checkout)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR = PYPROJECT["tool"]["setuptools"]["package-dir"]  # {"weakspots.sims": "sims", ...}
NOT_SHIPPED = {"tests", "docs", "examples", "build", "dist"}  # top-level folders that are not code

# Packages a user might keep beside a script; each decoy fails loudly on import, so any
# bare `import theory` inside weakspots (instead of `weakspots.theory`) breaks the test.
DECOYS = ("theory", "sims", "idealized", "figures", "benchmarks", "probe", "cli")
SUBPACKAGES = sorted(p for p in PACKAGE_DIR if p != "weakspots")

# Imports every module of the installed weakspots' packages (not `__main__`, which runs the CLI), then
# compares theory.growth_rate with the closed form -(N/(N-1)) beta^2/s^3 l''(beta/s) of
# docs/theory.md §6.2, written out here with l''(m) = 2 g^2 (1-g)(2-3g), g = 1 - sigma_N(m).
IMPORT_EVERYTHING = """
import importlib, math, pkgutil, sys
import weakspots
print("FILE", weakspots.__file__)
names = []
for package in {packages!r}:
    module = importlib.import_module(package)
    names += [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")]
for name in names:
    if name.rsplit(".", 1)[-1] != "__main__":
        importlib.import_module(name)
for pkg in {pkgs!r}:
    assert pkg not in sys.modules, f"top-level {{pkg}} was imported"
s, n, beta = 8, 64, 16.0
g = 1.0 - 1.0 / (1.0 + (n - 1) * math.exp(-beta / s))
closed = -(n / (n - 1)) * beta**2 / s**3 * 2 * g**2 * (1 - g) * (2 - 3 * g)
assert abs(float(weakspots.theory.growth_rate(s, n, beta)) - closed) < 1e-12 * closed
print("MODULES", len(names))
"""


def _source_modules() -> set[str]:
    """Every module of the repository's packages, as its path inside the wheel."""
    out = set()
    for package, folder in PACKAGE_DIR.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            rel = path.relative_to(base)
            # a module ships only if every folder from the package root down is a package
            parents = [base / Path(*rel.parts[:i]) for i in range(len(rel.parts))]
            if all((p / "__init__.py").is_file() for p in parents):
                out.add("/".join((*package.split("."), *rel.parts)))
    return out


def _decoy_folder(where: Path) -> Path:
    where.mkdir()
    for name in DECOYS:
        (where / name).mkdir()
        (where / name / "__init__.py").write_text(
            f'raise ImportError("the user\'s own {name}/ shadowed weakspots.{name}")\n'
        )
    (where / "script.py").write_text(IMPORT_EVERYTHING.format(pkgs=DECOYS, packages=SUBPACKAGES))
    return where


def _run_beside_decoys(where: Path, pythonpath: Path) -> str:
    """Run the import check as a script in the decoys' folder (sys.path[0] is that folder)."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "script.py"], cwd=where, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_top_level_package_is_mapped():
    """A new top-level package folder that pyproject's package-dir forgets would not ship."""
    packages = {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file() and p.name not in NOT_SHIPPED
    }
    assert packages <= set(PACKAGE_DIR.values())
    declared = set(PYPROJECT["tool"]["setuptools"].get("packages", []))
    if declared:  # an explicit package list must name every subpackage (sims.experiments ...)
        found = {m.rsplit("/", 1)[0].replace("/", ".") for m in _source_modules()}
        assert found <= declared, f"not in [tool.setuptools] packages: {found - declared}"


def _can_build_wheels() -> bool:
    """setuptools >= 68 (pyproject's build requirement) with a bdist_wheel command."""
    try:
        import setuptools
    except ImportError:
        return False
    major = int(setuptools.__version__.split(".")[0])
    return major >= 68 and (
        importlib.util.find_spec("wheel") is not None
        or importlib.util.find_spec("setuptools.command.bdist_wheel") is not None
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """`pip wheel --no-deps .` on a copy of the working tree (the build writes beside it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0:
        for rel in filter(None, listed.stdout.split("\0")):
            if (ROOT / rel).is_file():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
    else:  # not a git checkout
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info"))
    # Without build isolation where this environment can build wheels itself (offline);
    # else pip fetches the build backend, as a user's `pip wheel --no-deps .` does.
    isolation = ["--no-build-isolation"] if _can_build_wheels() else []
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", *isolation, "-w", out, src],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = out.glob("weakspots-*.whl")
    return built


def test_wheel_holds_every_module_under_weakspots(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    code = {n for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    outside = sorted(n for n in code if not n.startswith("weakspots/"))
    assert not outside, f"files outside weakspots/: {outside}"
    modules = {n for n in code if n.endswith(".py")}
    expected = _source_modules()
    assert "weakspots/sims/experiments/__init__.py" in expected  # the walk sees subpackages
    assert not expected - modules, f"missing from the wheel: {sorted(expected - modules)}"
    assert not modules - expected, f"in the wheel, not in the source: {sorted(modules - expected)}"
    # and the files read at run time: every study's recorded runs and the example specs
    data = {
        f"weakspots/{p.relative_to(ROOT)}" for p in (ROOT / "sims/experiments").glob("**/runs/*.json")
    }
    data |= {f"weakspots/examples/{p.name}" for p in (ROOT / "examples").glob("*.toml")}
    assert len(data) > 10 and not data - code, f"missing from the wheel: {sorted(data - code)}"


def test_installed_wheel_is_not_shadowed_by_user_packages(wheel, tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        + ["--target", site, wheel],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = _run_beside_decoys(_decoy_folder(tmp_path / "project"), site)
    files = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("FILE")]
    assert files and all(Path(f).is_relative_to(site) for f in files), out


def test_source_checkout_is_not_shadowed_by_user_packages(tmp_path):
    out = _run_beside_decoys(_decoy_folder(tmp_path / "project"), ROOT)
    files = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("FILE")]
    assert files and all(Path(f).is_relative_to(ROOT) for f in files), out


# The cheapest `weakspots check --quick` that reads every kind of package data: the decoder
# experiments read their studies' recorded runs (sims/experiments/decoder/*/runs/), readout_exact trains and integrates.
CHECK = ["check", "--quick", "--only", "lm_mechanism", "lm_mitigations", "readout_exact"]


@pytest.mark.slow  # pip installs every dependency into a fresh venv: about 7 min, then 3
def test_wheel_in_a_fresh_venv_runs_check_and_the_readme(wheel, tmp_path):
    """The wheel alone (no checkout on the path, no system site-packages), from an empty folder."""
    from test_readme import README, README_CLAIMS, python_blocks, run_as_user

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = venv / "bin" / "python"
    # dependencies from the index pip is configured with (a local mirror where there is one)
    proc = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", wheel], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    user = tmp_path / "user"
    user.mkdir()
    where = subprocess.run(
        [python, "-c", "import weakspots.sims.experiments.decoder.ablation.study as s; print(s.RECORDED)"],
        cwd=user, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr[-3000:]
    assert Path(where.stdout.strip()).is_relative_to(venv)  # the installed copy's data
    check = subprocess.run(
        [venv / "bin" / "weakspots", *CHECK, "--quiet"],
        cwd=user, env={**env, "MPLBACKEND": "Agg"}, capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert "0 failing" in check.stdout.splitlines()[-1]
    readme = tmp_path / "readme"
    readme.mkdir()
    proc = run_as_user(python_blocks(README) + README_CLAIMS, readme, python=str(python))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "README CLAIMS HOLD" in proc.stdout

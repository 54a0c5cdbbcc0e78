"""`weakspots check` (sims.check): row format, pass flags computed, exit codes."""

import json

import numpy as np
import pytest

from weakspots.sims import check
from weakspots.sims.cli import main

KEYS = {"name", "config", "predicted", "ode", "sgd", "rel_error", "tolerance", "pass"}


def test_agreement_row_computes_pass():
    good = check.agreement_row("x", "c", 2.0, ode=2.001, tolerance=1e-3)
    assert set(good) == KEYS and good["pass"] and good["rel_error"] == pytest.approx(5e-4)
    assert not check.agreement_row("x", "c", 2.0, ode=2.001, sgd=2.1, tolerance=1e-3)["pass"]
    assert not check.agreement_row("x", "c", 2.0, ode=float("nan"))["pass"]
    assert not check.agreement_row("x", "c", 2.0)["pass"]  # nothing measured
    assert check.agreement_row("x", "c", 0.0, sgd=0.02, tolerance=0.03, absolute=True)["pass"]


def test_growth_rows_pass_and_a_wrong_prediction_fails():
    rows = check.growth_rows(quick=True)
    assert len(rows) == 3 and all(set(r) == KEYS for r in rows)
    assert all(r["pass"] for r in rows)
    r = rows[0]
    wrong = check.agreement_row(
        r["name"], r["config"], 1.01 * r["predicted"], ode=r["ode"], tolerance=r["tolerance"]
    )
    assert not wrong["pass"]


def test_cli_exit_code_and_json(monkeypatch, capsys):
    rows = [check.agreement_row(f"r{i}", "c", 1.0, ode=1.0) for i in range(12)]
    monkeypatch.setattr(check, "SECTIONS", (lambda quick: rows,))
    assert main(["check", "--quick", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 12 and all(r["pass"] is True for r in out["rows"])
    bad = [*rows, check.agreement_row("bad", "c", 1.0, ode=2.0)]
    monkeypatch.setattr(check, "SECTIONS", (lambda quick: bad,))
    assert main(["check", "--quick", "--quiet"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_table_end_to_end(capsys):
    code = main(["check", "--quick", "--json", "--quiet"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) >= 12 and all(set(r) == KEYS for r in rows)
    failed = [r["name"] + " " + r["config"] for r in rows if not r["pass"]]
    assert code == (1 if failed else 0)
    assert not failed, failed
    names = " ".join(r["name"] for r in rows)
    for topic in (
        "growth",
        "threshold",
        "support",
        "ODE vs SGD",
        "1/d",
        "accuracy",
        "specialise",
        "solver",
        "coverage",
        "learned gain",
        "ce",
        "re-entry",
    ):
        assert topic in names
    assert np.isfinite([r["rel_error"] for r in rows]).all()

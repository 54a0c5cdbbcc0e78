import numpy as np
import pytest
from scipy import stats

from weakspots.idealized import metrics


@pytest.mark.parametrize(("k", "n"), [(0, 50), (7, 50), (50, 50), (1234, 2048)])
def test_wilson_matches_scipy(k, n):
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = metrics.wilson_interval(k / n, n)
    np.testing.assert_allclose([low, high], [ci.low, ci.high], rtol=1e-6, atol=1e-9)


def test_psc_delta_and_spectrum_of_a_cosine():
    s = 8
    phases = np.arange(s)
    acc = 0.5 + 0.3 * np.cos(2 * np.pi * 2 * phases / s)
    assert metrics.delta_max(acc) == pytest.approx(0.6)
    assert metrics.phase_sensitivity(acc) == pytest.approx((0.3**2 / 2) / 0.5)
    spectrum = metrics.harmonic_spectrum(acc)
    np.testing.assert_allclose(spectrum, [0.5, 0.0, 0.15, 0.0, 0.0], atol=1e-12)


def test_buckets_partition_the_phases():
    for s in range(1, 12):
        buckets = metrics.phase_buckets(s)
        members = sorted(sum(buckets.values(), []))
        assert members == list(range(s))
    assert metrics.phase_buckets(8) == {"boundary": [0, 7], "edge": [1, 6], "centre": [2, 3, 4, 5]}


def test_support_and_specialization():
    uniform = np.full((1, 8), 1 / 8)
    three = np.array([[1 / 3, 1 / 3, 1 / 3, 0, 0, 0, 0, 0]])
    assert metrics.support_size(uniform).tolist() == [8]
    assert metrics.support_size(three).tolist() == [3]
    np.testing.assert_allclose(metrics.specialization_index(uniform), [0.0], atol=1e-12)
    np.testing.assert_allclose(metrics.specialization_index(three), [1 - np.log(3) / np.log(8)])
    np.testing.assert_allclose(metrics.specialization_index(np.eye(8)[:1]), [1.0])


def test_phase_report_is_plain_python():
    report = metrics.phase_report(np.array([1.0, 0.5, 0.25, 0.25]), 100)
    assert report["mean_accuracy"] == pytest.approx(0.5)
    assert report["delta_max"] == pytest.approx(0.75)
    assert isinstance(report["phase_accuracy"], list)
    assert len(report["phase_accuracy_ci"]) == 4

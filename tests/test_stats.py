"""Statistics for many-seed runs, against brute-force oracles."""
import itertools

import numpy as np
import pytest

from pe_spectral.analysis import stats


def _records(curves, examples=None):
  """metrics.jsonl-like rows from per-seed curves [evals][seeds]."""
  rows = []
  for i, vals in enumerate(curves):
    r = {"step": i + 1, "train_accuracy": list(vals)}
    if examples is not None:
      r["examples_seen"] = examples[i]
    rows.append(r)
  return rows


def test_plateau_per_seed_window_and_tolerance():
  # 9 evaluations; the last third (evals at steps >= 6) is the window.
  flat = [0.1, 0.5, 0.8, 0.9, 0.95, 0.96, 0.965, 0.968, 0.97]
  rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
  early_jump = [0.0, 0.0, 0.0, 0.0, 0.0, 0.9, 0.9, 0.9, 0.9]  # jump just before the window
  p = stats.plateau(_records(list(zip(flat, rising, early_jump))))
  assert p["per_seed"] == [True, False, True] and not p["all"]
  assert p["window_start"] == pytest.approx(6.0)
  assert p["evaluations"] == 4
  np.testing.assert_allclose(p["max_dev"], [0.01, 0.3, 0.0], atol=1e-12)
  # the window follows examples seen, not the evaluation index
  ex = [1, 2, 3, 4, 5, 6, 7, 8, 90]
  q = stats.plateau(_records(list(zip(flat)), ex))
  assert q["evaluations"] == 1 and q["per_seed"] == [False]  # one point shows nothing


def test_plateau_rejects_bad_input():
  with pytest.raises(ValueError):
    stats.plateau([])
  with pytest.raises(ValueError):
    stats.plateau(_records([[0.5]]), frac=0.0)


def test_bootstrap_matches_exhaustive_resampling():
  # Oracle: all n^n equally likely resamples of n = 5 values, exact quantiles.
  x = np.array([0.1, 0.4, 0.45, 0.9, 0.95])
  means = np.array([x[list(idx)].mean()
                    for idx in itertools.product(range(5), repeat=5)])
  lo_exact, hi_exact = np.quantile(means, [0.025, 0.975])
  m, lo, hi = stats.bootstrap_mean_ci(x)
  assert m == pytest.approx(x.mean())
  assert lo == pytest.approx(lo_exact, abs=0.02) and hi == pytest.approx(hi_exact, abs=0.02)
  assert x.min() <= lo <= m <= hi <= x.max()
  assert stats.bootstrap_mean_ci(x) == (m, lo, hi)  # deterministic
  assert stats.bootstrap_mean_ci([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))
  with pytest.raises(ValueError):
    stats.bootstrap_mean_ci([0.1, np.nan])


def test_sign_flip_pvalue_matches_a_loop():
  rng = np.random.default_rng(3)
  for n in (1, 4, 7):
    d = rng.normal(0.3, 1.0, n)
    count = 0
    for mask in range(2 ** n):  # independent enumeration via bit masks
      s = sum(-v if (mask >> i) & 1 else v for i, v in enumerate(d))
      count += abs(s) / n >= abs(d.mean()) - 1e-12
    assert stats.sign_flip_pvalue(d) == pytest.approx(count / 2 ** n)
  assert stats.sign_flip_pvalue(np.ones(8)) == pytest.approx(2 / 256)


def test_paired_matches_seeds_and_decides():
  a = [0.9, 0.8, 0.7]   # seeds 0, 1, 2
  b = [0.5, 0.6, 0.4]   # seeds 2, 1, 0
  p = stats.paired(np.array(a), np.array(b), seeds_a=[0, 1, 2], seeds_b=[2, 1, 0])
  np.testing.assert_allclose(p["diff"], [0.9 - 0.4, 0.8 - 0.6, 0.7 - 0.5])
  assert p["seeds"] == [0, 1, 2] and p["wins"] == 3 and p["n"] == 3
  assert stats.verdict(p) == "reproduced"
  assert stats.verdict(stats.paired(np.array(b), np.array(a), seeds_a=[2, 1, 0],
                                    seeds_b=[0, 1, 2])) == "refuted"
  mixed = stats.paired(np.array([0.5, 0.4, 0.6]), np.array([0.45, 0.5, 0.5]))
  assert stats.verdict(mixed) == "inconclusive"
  assert stats.verdict(p, margin=0.6) == "refuted"  # the CI lies below a 0.6 margin
  with pytest.raises(ValueError):
    stats.paired(np.array(a), np.array(b), seeds_a=[0, 1, 2], seeds_b=[5, 6, 7])
  with pytest.raises(ValueError):
    stats.paired(np.array(a), np.array([0.1, 0.2]))

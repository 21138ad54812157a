"""Statistics for many-seed runs: convergence, bootstrap intervals, paired tests.

Everything here works on small per-seed arrays (a run has a handful of seeds)
and is deterministic (fixed resampling seed) so a report rebuilt from the same
files prints the same numbers. The resampling is scipy.stats' (``bootstrap``,
``permutation_test``, ``spearmanr``); what is written here is the choice of
method and the edge cases scipy refuses (one value, a degenerate resample).

* :func:`plateau` -- the convergence criterion a finished run is judged by;
* :func:`bootstrap_mean_ci` -- percentile-bootstrap CI of a mean (no normality
  assumption; it stays inside the data's range, so a bounded score such as
  an accuracy or a deposit score gets an interval inside its bounds);
* :func:`paired` -- the per-seed difference of two runs trained on the same
  seeds (same initialisation keys, batch order and data), with its bootstrap CI
  and an exact sign-flip permutation p-value;
* :func:`verdict` -- the pre-registered decision rule for "A > B".
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence

import numpy as np

__all__ = ["PLATEAU_FRAC", "PLATEAU_TOL", "plateau", "bootstrap_mean_ci",
           "paired", "sign_flip_pvalue", "verdict", "loss_spikes",
           "examples_to_threshold", "spearman", "bootstrap_spearman_ci"]

def _sps():
  """``scipy.stats``, imported on first use: its import takes about 1 s (measured
  with ``python -X importtime``), which every training program paid at start
  although only the analyses' intervals and tests call it."""
  from scipy import stats
  return stats


# The convergence criterion (studies/arxiv_2505_13027/study.md): over every evaluation in the
# last third of training (by examples seen), each seed's train accuracy stays
# within 1 point of its final value. A cosine schedule decays to 0, so a
# shorter window would pass trivially; at two thirds of training the learning
# rate is still ~28 % of its peak.
PLATEAU_FRAC = 1.0 / 3.0
PLATEAU_TOL = 0.01
# The second rule (studies/arxiv_2505_13027/study.md), for the first rule's known false negative
# (a model that keeps memorising while its test accuracy is flat): the same
# window on *test* accuracy, within 2 points (the test split is noisier).
TEST_PLATEAU_METRIC = "test_accuracy"
TEST_PLATEAU_TOL = 0.02

_RESAMPLES = 10_000
_RNG_SEED = 0


def plateau(records: Sequence[dict], *, metric: str = "train_accuracy",
            frac: float = PLATEAU_FRAC, tol: float = PLATEAU_TOL) -> dict:
  """Judges whether a run had plateaued, per seed.

  Args:
    records: the run's evaluations (``metrics.jsonl`` rows) in step order;
      each has ``step`` and ``metric`` (a per-seed list), and optionally
      ``examples_seen`` (defaults to ``step``: the window is a fraction of
      training either way).
    metric: the per-seed accuracy judged.
    frac: the final fraction of training that forms the window.
    tol: the largest allowed distance from the final value (accuracy units).

  Returns:
    ``{"metric", "frac", "tol", "window_start", "evaluations", "max_dev"
    (per seed), "per_seed" (bools), "all" (bool), "criterion" (text)}``.
    A window holding fewer than 2 evaluations cannot show a plateau: every
    seed is then judged not plateaued.
  """
  if not records:
    raise ValueError("plateau: no evaluations")
  if not 0.0 < frac <= 1.0 or tol < 0:
    raise ValueError(f"plateau: need 0 < frac <= 1 and tol >= 0, got {frac}, {tol}")
  seen = np.asarray([r.get("examples_seen", r["step"]) for r in records], float)
  vals = np.asarray([r[metric] for r in records], float)  # [evals, seeds]
  start = (1.0 - frac) * seen[-1]
  window = vals[seen >= start - 1e-9]
  dev = np.abs(window - vals[-1]).max(axis=0)
  ok = (dev <= tol + 1e-12) & (window.shape[0] >= 2)
  return {"metric": metric, "frac": frac, "tol": tol,
          "window_start": float(start), "evaluations": int(window.shape[0]),
          "max_dev": dev.tolist(), "per_seed": ok.tolist(), "all": bool(ok.all()),
          "criterion": (f"{metric} within {100 * tol:g} point(s) of its final value "
                        f"at every evaluation of the last {frac:.0%} of training")}


def bootstrap_mean_ci(x, *, level: float = 0.95,
                      resamples: int = _RESAMPLES) -> tuple[float, float, float]:
  """``(mean, lo, hi)``: the mean and its percentile-bootstrap CI
  (``scipy.stats.bootstrap``, ``method="percentile"``: the interval stays
  inside the data's range, which BCa, scipy's default, does not promise).

  Deterministic (fixed resampling seed). One value gives ``lo = hi = mean``;
  equal values give their value (scipy warns of a degenerate distribution).
  """
  x = np.asarray(x, float).ravel()
  if x.size == 0 or not np.isfinite(x).all():
    raise ValueError("bootstrap_mean_ci needs finite values")
  m = float(x.mean())
  if x.size == 1 or np.ptp(x) == 0:
    return m, m, m
  res = _sps().bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=level,
                      method="percentile", random_state=np.random.default_rng(_RNG_SEED))
  return m, float(res.confidence_interval.low), float(res.confidence_interval.high)


def sign_flip_pvalue(d) -> float:
  """Exact two-sided sign-flip permutation p-value for mean(d) = 0.

  Under the null each per-seed difference is as likely negative as positive;
  ``scipy.stats.permutation_test`` enumerates all 2^n sign patterns (one
  sample, ``permutation_type="samples"``, ``n_resamples=inf``; 1 <= n <= 20).
  """
  d = np.asarray(d, float).ravel()
  n = d.size
  if n == 0 or n > 20:
    raise ValueError(f"sign_flip_pvalue needs 1..20 values, got {n}")
  if n == 1:  # both sign patterns have |mean| = |d| (scipy asks for two values)
    return 1.0
  res = _sps().permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                             permutation_type="samples", n_resamples=np.inf,
                             alternative="two-sided")
  return float(res.pvalue)


def paired(a, b, *, seeds_a: Optional[Sequence[int]] = None,
           seeds_b: Optional[Sequence[int]] = None, level: float = 0.95) -> dict:
  """The per-seed difference ``a - b`` of two runs on the same seeds.

  With ``seeds_a``/``seeds_b`` given, the runs are matched on their common
  seeds (a run trained on other seeds cannot be paired: ValueError).

  Returns ``{"n", "seeds", "diff" (per seed), "mean", "lo", "hi" (bootstrap
  CI of the mean difference), "wins" (seeds with a > b), "p" (exact
  sign-flip p-value)}``.
  """
  a, b = np.asarray(a, float), np.asarray(b, float)
  if seeds_a is not None or seeds_b is not None:
    if seeds_a is None or seeds_b is None:
      raise ValueError("give the seeds of both runs or of neither")
    common = [s for s in seeds_a if s in set(seeds_b)]
    if not common:
      raise ValueError("the runs share no seed: they cannot be paired")
    ia = {s: i for i, s in enumerate(seeds_a)}
    ib = {s: i for i, s in enumerate(seeds_b)}
    a = a[[ia[s] for s in common]]
    b = b[[ib[s] for s in common]]
    seeds = list(common)
  else:
    if a.shape != b.shape:
      raise ValueError(f"paired runs need equal seed counts, got {a.shape} and {b.shape}")
    seeds = list(range(a.size))
  d = a - b
  mean, lo, hi = bootstrap_mean_ci(d, level=level)
  return {"n": int(d.size), "seeds": seeds, "diff": d.tolist(), "mean": mean,
          "lo": lo, "hi": hi, "wins": int((d > 0).sum()),
          "p": sign_flip_pvalue(d)}


def verdict(p: dict, *, margin: float = 0.0) -> str:
  """The pre-registered rule for the claim "A > B" from ``paired(A, B)``.

  ``reproduced`` if the CI of the mean difference lies above ``margin``;
  ``refuted`` if it lies below ``margin`` -- i.e. the data exclude A beating
  B by more than the margin (for margin 0: B >= A); else ``inconclusive``.
  """
  if p["lo"] > margin:
    return "reproduced"
  if p["hi"] < margin:
    return "refuted"
  return "inconclusive"


# Loss spikes (studies/arxiv_2505_13027/study.md, the thesis): a step whose batch loss exceeds both
# SPIKE_RATIO x the median of the previous SPIKE_WINDOW losses and that median
# plus SPIKE_MADS robust standard deviations (1.4826 x MAD) of them.
SPIKE_WINDOW, SPIKE_RATIO, SPIKE_MADS = 20, 1.5, 6.0


def loss_spikes(losses, *, skip: int = 0, window: int = SPIKE_WINDOW,
                ratio: float = SPIKE_RATIO, mads: float = SPIKE_MADS,
                floor: float = 0.0) -> np.ndarray:
  """Indices of loss spikes in one seed's per-step losses ``[steps]``.

  Step ``t >= max(skip, window)`` is a spike when ``loss[t] > ratio * med``
  and ``loss[t] > med + mads * 1.4826 * MAD``, where ``med`` and ``MAD`` are
  the median and median absolute deviation of ``loss[t-window:t]``. ``skip``:
  steps not judged (the warm-up). ``floor``: a spike must also exceed this
  absolute loss (0, the pre-registered rule, counts any relative jump, which
  near zero loss is one misclassified example: the study's RESULTS.md notes).
  """
  x = np.asarray(losses, np.float64)
  if x.ndim != 1:
    raise ValueError(f"losses must be [steps], got shape {x.shape}")
  if window < 2:
    raise ValueError(f"window must be >= 2, got {window}")
  out = []
  for t in range(max(skip, window), len(x)):
    prev = x[t - window:t]
    med = np.median(prev)
    mad = np.median(np.abs(prev - med))
    if x[t] > ratio * med and x[t] > med + mads * 1.4826 * mad and x[t] > floor:
      out.append(t)
  return np.asarray(out, np.int64)


def examples_to_threshold(records: Sequence[dict], *, frac: float = 0.9,
                          metric: str = "test_accuracy") -> np.ndarray:
  """Per seed, the examples seen at the first evaluation whose ``metric`` is
  at least ``frac`` times that seed's final value: ``float [seeds]``."""
  if not records:
    raise ValueError("no evaluation records")
  acc = np.asarray([r[metric] for r in records], np.float64)       # [evals, seeds]
  seen = np.asarray([r["examples_seen"] for r in records], np.float64)
  reached = acc >= frac * acc[-1][None, :]
  return seen[np.argmax(reached, axis=0)]  # the final evaluation always qualifies


def spearman(x, y) -> float:
  """Spearman rank correlation (``scipy.stats.spearmanr``: average ranks for
  ties); NaN when either side is constant."""
  if np.ptp(np.asarray(x, float)) == 0 or np.ptp(np.asarray(y, float)) == 0:
    return float("nan")
  sps = _sps()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", sps.ConstantInputWarning)
    return float(sps.spearmanr(x, y).statistic)


def bootstrap_spearman_ci(x, y, *, level: float = 0.95, resamples: int = _RESAMPLES,
                          seed: int = _RNG_SEED):
  """``(rho, lo, hi)``: Spearman's rho and its percentile-bootstrap CI over
  resampled (x, y) pairs, degenerate resamples (one value repeated) dropped --
  which ``scipy.stats.bootstrap`` cannot do (a NaN statistic makes its interval
  NaN), so the resampling is written here, on scipy's ``rankdata``."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
    raise ValueError(f"x and y must be equal-length 1-D with >= 3 points, got "
                     f"{x.shape} and {y.shape}")
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, len(x), size=(resamples, len(x)))
  sps = _sps()
  rx, ry = sps.rankdata(x[idx], axis=1), sps.rankdata(y[idx], axis=1)  # ranks within each resample
  rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
  den = np.sqrt((rx ** 2).sum(1) * (ry ** 2).sum(1))
  ok = den > 0  # degenerate resamples (all one value) have no correlation
  rhos = (rx * ry).sum(1)[ok] / den[ok]
  a = (1 - level) / 2
  return spearman(x, y), float(np.quantile(rhos, a)), float(np.quantile(rhos, 1 - a))

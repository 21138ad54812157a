"""studies/lm_stdlib's registered rules on hand-made run records (study.md):
each verdict of (i), (i-b), (ii) and (iii), and the report renders with runs
missing."""
import numpy as np

from studies.lm_stdlib import report as R


def _lengths(per_factor: dict, scalings=None) -> dict:
  rows = lambda d: [{"factor": f, "bits_per_byte": v, "mean": None if v is None else
                     float(np.mean(v))} for f, v in d.items()]
  out = {"bits_per_byte": {"none": rows(per_factor)}, "pe": "x", "seeds": [0, 1, 2, 3, 4],
         "train_len": 128, "task": "lm", "faithful": False}
  for name, d in (scalings or {}).items():
    out["bits_per_byte"][name] = rows(d)
  return out


def _run(per_factor, *, bpb=2.0, scalings=None, contraction=None, widening=None, drop=None):
  r = {"summary": {"test_bits_per_byte_mean": bpb, "test_bits_per_byte_std": 0.01,
                   "unigram_bits_per_byte": 4.436},
       "lengths": _lengths(per_factor, scalings)}
  if contraction is not None or widening is not None:
    shape = (5, 2, 4)
    r["decompose"] = {"contraction_ratio_median": np.full(shape, contraction or 1.0).tolist(),
                      "widening_ratio_median": np.full(shape, widening or 1.0).tolist()}
  if drop is not None:
    r["ablation"] = {"drop": drop}
  return r


BASE = [2.0, 2.1, 2.0, 2.05, 1.95]


def test_flat_not_flat_undecided_and_not_evaluable():
  run = _run({1.0: BASE, 2.0: [b + 0.01 for b in BASE], 4.0: [b + 0.5 for b in BASE],
              8.0: [b + d for b, d in zip(BASE, [0.0, 0.1, 0.02, 0.08, 0.05])], 16.0: None})
  assert R.flat_verdict(run, 2.0)["verdict"] == "flat"
  assert R.flat_verdict(run, 4.0)["verdict"] == "not flat"
  assert R.flat_verdict(run, 8.0)["verdict"] == "undecided"
  assert R.flat_verdict(run, 16.0)["verdict"] == "not evaluable"
  np.testing.assert_allclose(R.length_ratio(run, 4.0), 0.5)


def test_a_scaling_that_lowers_every_seed_helps_and_one_that_raises_hurts():
  run = _run({1.0: BASE, 4.0: [3.0] * 5},
             scalings={"yarn": {1.0: BASE, 4.0: [2.5, 2.6, 2.4, 2.5, 2.55]},
                       "pi": {1.0: BASE, 4.0: [3.5, 3.6, 3.4, 3.5, 3.45]}})
  assert R.scaling_verdict(run, "yarn", 4.0)["verdict"] == "helps"
  assert R.scaling_verdict(run, "pi", 4.0)["verdict"] == "hurts"
  assert R.scaling_verdict(run, "pi", 16.0)["verdict"] == "missing"


def _noisy(value, seed):
  rng = np.random.default_rng(seed)
  return (value * np.exp(0.01 * rng.standard_normal((5, 2, 4)))).tolist()


def test_claim_e_reproduced_refuted_and_inconclusive():
  runs = {"rope": _run({1.0: BASE}, contraction=0.9), "alibi": _run({1.0: BASE}, widening=1.3),
          "fire": _run({1.0: BASE}, widening=1.2), "kerple_log": _run({1.0: BASE}, widening=1.1)}
  for i, pe in enumerate(runs):  # a spread over seeds, so each CI is an interval
    key = "contraction_ratio_median" if pe == "rope" else "widening_ratio_median"
    runs[pe]["decompose"][key] = _noisy(np.mean(runs[pe]["decompose"][key]), i)
  assert R.claim_e(runs)["verdict"] == "reproduced"
  runs["fire"]["decompose"]["widening_ratio_median"] = _noisy(0.8, 9)
  assert R.claim_e(runs)["verdict"] == "refuted"
  del runs["fire"]
  out = R.claim_e(runs)
  assert out["verdict"] == "inconclusive" and out["missing"] == ["fire"]
  runs["fire"] = _run({1.0: BASE}, bpb=4.0, widening=1.2)  # untrained: not counted
  assert "fire" in R.claim_e(runs)["missing"]


def test_claim_c_is_the_deposit_rule_over_two_thirds_of_the_seeds():
  lone = [[0.10, 0.01, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]  # layer 0: one head 10x the next
  shared = [[0.05, 0.04, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
  assert R.claim_c(_run({1.0: BASE}, drop=[lone] * 4 + [shared]))["present"]
  assert not R.claim_c(_run({1.0: BASE}, drop=[lone] * 3 + [shared] * 2))["present"]


def test_the_report_renders_with_runs_missing():
  runs = {"rope": _run({1.0: BASE, 2.0: BASE, 4.0: BASE, 8.0: BASE, 16.0: BASE},
                       scalings={"yarn": {4.0: BASE, 16.0: BASE}, "pi": {4.0: BASE}},
                       contraction=0.9, drop=[[[0.1, 0.0, 0, 0], [0, 0, 0, 0]]] * 5)}
  text = R.render(runs)
  assert "**Not run yet:** nope, sinusoidal, learned, alibi, fire" in text
  assert "Exploratory" not in text and "from 1 committed registered run(s)" in text
  # a PE added after the pre-registration: described, counted apart, no verdict
  runs["path"] = _run({1.0: BASE, 2.0: [2.5] * 5}, widening=0.8)
  text = R.render(runs)
  assert "from 1 committed registered run(s)" in text
  assert "| path | 2.000 ± 0.010 | yes | 2.020 | 2.500 | n/a | n/a | n/a | layer 0: 0.800" in text
  assert "| rope | 2.020 | 2.020 |" in text and "**inconclusive**" in text

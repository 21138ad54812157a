"""The thesis decision rules on hand-made runs: reproduced, refuted,
inconclusive and not-converged cases, without files or markdown."""
import numpy as np
import pytest

from pe_spectral.analysis import stats
from studies.arxiv_2505_13027 import claims as rules


def _run(pe, coupling, *, ratio, speed, sharp=100.0, spikes=0, plateaued=8, seeds=8,
         layers=2, heads=2, noise=0.02, seed=0):
  """A fake run: coupling ratio ``ratio`` (per seed, jittered), test accuracy
  reaching 90 % of final after ``speed`` evaluations, peak sharpness, spikes."""
  rng = np.random.default_rng(seed)
  evals = 10
  ratios = ratio * np.exp(noise * rng.normal(size=(evals, seeds, layers, heads)))
  key = "contraction_ratio" if coupling == "multiplicative" else "widening_ratio"
  other = "widening_ratio" if key == "contraction_ratio" else "contraction_ratio"
  spectra = [{"step": e + 1, key: ratios[e].tolist(),
              other: np.ones((seeds, layers, heads)).tolist()} for e in range(evals)]
  speed = np.broadcast_to(np.asarray(speed), (seeds,))
  metrics = []
  for e in range(evals):
    acc = [0.95 if e + 1 >= s else 0.5 * (e + 1) / s for s in speed]
    metrics.append({"step": 10 * (e + 1), "examples_seen": 100 * (e + 1),
                    "test_accuracy": acc, "train_accuracy": acc})
  curvature = [{"step": e + 1, "precond_sharpness": (sharp * (1 + 0.01 * rng.normal(size=seeds))
                                                     * (e + 1) / evals).tolist()}
               for e in range(evals)]
  spikes = np.broadcast_to(np.asarray(spikes), (seeds,))
  losses = np.full((seeds, 100), 1.0) + 0.01 * rng.normal(size=(seeds, 100))
  for s in range(seeds):
    for t in range(int(spikes[s])):
      losses[s, 40 + 5 * t] = 5.0
  steps = [{"step": 50, "first_step": 0, "loss": losses[:, :50].tolist()},
           {"step": 100, "first_step": 50, "loss": losses[:, 50:].tolist()}]
  per = [True] * plateaued + [False] * (seeds - plateaued)
  return {"summary": {"pe": pe, "seeds": list(range(seeds)), "plateau": {"per_seed": per}},
          "config": {"run": {"task": {"name": "distance"},
                             "train": {"warmup_frac": 0.1, "epochs": 8}}, "total_steps": 100},
          "metrics": metrics, "steps": steps, "spectra": spectra, "curvature": curvature,
          "coupling": coupling}


def _four(**over):
  base = {"rope": _run("rope", "multiplicative", ratio=0.8, speed=2, sharp=50, seed=1),
          "rope_additive": _run("rope_additive", "additive", ratio=1.2, speed=5, sharp=90,
                                seed=2),
          "alibi_multiplicative": _run("alibi_multiplicative", "multiplicative", ratio=0.7,
                                       speed=3, sharp=60, seed=3),
          "alibi": _run("alibi", "additive", ratio=1.5, speed=6, sharp=80, seed=4)}
  base.update(over)
  return base


def _with_budget(run, epochs, task=None):
  cfg = run["config"]["run"]
  new = dict(cfg, train=dict(cfg["train"], epochs=epochs))
  if task is not None:
    new["task"] = dict(cfg["task"], name=task)
  return dict(run, config=dict(run["config"], run=new))


def test_each_pair_is_judged_at_its_longest_complete_budget():
  """The second amendment's rule: a pair at the longest budget holding both
  members; a lone member longer elsewhere does not pull its pair along."""
  short = {pe: _with_budget(r, 16) for pe, r in _four().items()}
  long_ = {pe: _with_budget(r, 32) for pe, r in _four().items()
           if pe in ("rope", "rope_additive", "alibi")}   # alibi's partner missing
  judged, sup = rules.judged_runs([short, long_])
  assert list(judged) == ["rope", "rope_additive", "alibi_multiplicative", "alibi"]
  assert [rules.budget(judged[pe])[0] for pe in judged] == [32, 32, 16, 16]
  assert [sorted(b) for b in sup] == [["rope", "rope_additive"], ["alibi"]]
  # Order of the directories does not matter; an unpaired extra PE rides along.
  extra = {"nope": _with_budget(_run("nope", "additive", ratio=1.0, speed=3), 8)}
  judged2, sup2 = rules.judged_runs([long_, short, extra])
  assert {pe: rules.budget(r) for pe, r in judged2.items()} == {
      "rope": (32, 8), "rope_additive": (32, 8), "alibi_multiplicative": (16, 8),
      "alibi": (16, 8), "nope": (8, 8)}
  assert [sorted(b) for b in sup2] == [["alibi"], ["rope", "rope_additive"]]
  # Only a shorter pair member at the longer budget: nothing moves.
  judged3, _ = rules.judged_runs([short, {"rope": long_["rope"]}])
  assert rules.budget(judged3["rope"])[0] == 16
  assert rules.judged_runs([]) == ({}, [])


def test_claim_e_reproduced_refuted_inconclusive():
  assert rules.claim_e(_four())["verdict"] == "reproduced"
  wrong = _four(rope=_run("rope", "multiplicative", ratio=1.3, speed=2))
  res = rules.claim_e(wrong)
  assert res["verdict"] == "refuted"
  assert not [r for r in res["rows"] if r["pe"] == "rope"][0]["holds"]
  flat = _four(alibi=_run("alibi", "additive", ratio=1.0, speed=6, noise=0.3))
  assert rules.claim_e(flat)["verdict"] == "inconclusive"
  three = _four()
  del three["alibi"]
  assert rules.claim_e(three)["verdict"] == "inconclusive"  # a PE missing


def test_claim_f_pairs():
  res = rules.claim_f(_four())
  assert res["verdict"] == "reproduced"
  ex = res["pairs"]["rotary"]["examples"]
  assert ex["mean"] == pytest.approx(300.0)  # (5 - 2) evaluations of 100 examples
  slower = _four(rope=_run("rope", "multiplicative", ratio=0.8, speed=7, sharp=50))
  assert rules.claim_f(slower)["pairs"]["rotary"]["verdict"] == "refuted"
  assert rules.claim_f(slower)["verdict"] == "refuted"
  # faster but sharper and spikier: the secondary parts refute it
  sharp = _four(rope=_run("rope", "multiplicative", ratio=0.8, speed=2, sharp=200,
                          spikes=2))
  assert rules.claim_f(sharp)["pairs"]["rotary"]["verdict"] == "refuted"
  # faster, sharper, but fewer spikes: the "or" holds
  spiky_add = _four(rope=_run("rope", "multiplicative", ratio=0.8, speed=2, sharp=200),
                    rope_additive=_run("rope_additive", "additive", ratio=1.2, speed=5,
                                       sharp=90, spikes=3))
  assert rules.claim_f(spiky_add)["pairs"]["rotary"]["verdict"] == "reproduced"
  unconv = _four(alibi=_run("alibi", "additive", ratio=1.5, speed=6, plateaued=3))
  res = rules.claim_f(unconv)
  assert res["pairs"]["decay"]["verdict"] == "inconclusive (not converged)"
  assert res["verdict"].startswith("inconclusive")


def test_spike_counts_and_examples_to_threshold():
  run = _run("x", "additive", ratio=1.0, speed=[1, 2, 3, 4, 5, 6, 7, 8], spikes=[0, 1, 2, 3,
                                                                                 0, 0, 0, 0])
  np.testing.assert_array_equal(rules.spike_counts(run), [0, 1, 2, 3, 0, 0, 0, 0])
  np.testing.assert_array_equal(rules.examples_to_threshold(run), 100 * np.arange(1, 9))
  # a spike inside the warm-up (skip) is not counted
  x = np.ones(60)
  x[5] = 9.0
  assert len(stats.loss_spikes(x, skip=0)) == 0  # before a full window
  x[30] = 9.0
  assert list(stats.loss_spikes(x, skip=31)) == [] and list(stats.loss_spikes(x)) == [30]
  # near zero loss a relative jump counts under the pre-registered rule (floor 0);
  # the sensitivity floor keeps only jumps above an absolute loss
  tiny = np.full(60, 0.003)
  tiny[40], tiny[50] = 0.02, 0.5
  assert list(stats.loss_spikes(tiny)) == [40, 50]
  assert list(stats.loss_spikes(tiny, floor=0.1)) == [50]


def test_spike_floor_is_in_force_only_for_pairs_judged_at_64_epochs():
  # rope_additive has 3 spikes of loss 5 on a loss-1 baseline; rope has 4 small
  # relative jumps near zero loss, which count only without the floor
  def tiny(run, jumps):
    steps = []
    for row in run["steps"]:
      loss = np.full_like(np.asarray(row["loss"]), 0.003)
      steps.append(dict(row, loss=loss))
    for s in range(len(run["summary"]["seeds"])):
      for t in range(jumps):
        steps[0]["loss"][s, 25 + 5 * t] = 0.02
    return dict(run, steps=steps)
  four = _four(rope=tiny(_run("rope", "multiplicative", ratio=0.8, speed=2, sharp=200), 4),
               rope_additive=_run("rope_additive", "additive", ratio=1.2, speed=5, sharp=90,
                                  spikes=3))
  short = rules.claim_f(four)["pairs"]["rotary"]
  assert short["spike_floor"] == 0.0 and short["spikes"]["mean"] == pytest.approx(-1.0)
  assert short["verdict"] == "refuted"  # sharper and (by the old count) spikier
  long = {pe: _with_budget(r, 64) for pe, r in four.items()}
  rot = rules.claim_f(long)["pairs"]["rotary"]
  assert rot["spike_floor"] == 0.1 and rot["spikes"]["mean"] == pytest.approx(3.0)
  assert rot["verdict"] == "reproduced"
  # one member short of 64 epochs: the pair keeps the registered rule without floor
  mixed = dict(long, rope=four["rope"])
  assert rules.claim_f(mixed)["pairs"]["rotary"]["spike_floor"] == 0.0
  # the Task 2 configuration (fourth amendment): the floor at any budget
  count = {pe: _with_budget(r, 24, task="count") for pe, r in four.items()}
  rot = rules.claim_f(count)["pairs"]["rotary"]
  assert rot["spike_floor"] == 0.1 and rot["verdict"] == "reproduced"
  assert rules.registered_spike_floor(count["rope"], four["rope_additive"]) == 0.0


def test_peak_sharpness_over_the_first_half_and_where_it_falls():
  """The fake run's sharpness grows linearly to ``sharp`` at the last of 10
  evaluations: the registered peak is the last value, the first half's peak
  the fifth, and the peak falls at the end of training."""
  r = _run("rope", "multiplicative", ratio=0.8, speed=2, sharp=200.0)
  s = np.asarray([c["precond_sharpness"] for c in r["curvature"]])
  np.testing.assert_allclose(rules.peak_sharpness(r), s[-1])
  np.testing.assert_allclose(rules.peak_sharpness(r, 0.5), s[4])
  np.testing.assert_allclose(rules.peak_sharpness_at(r), 1.0)
  # evaluation order comes from the step, not the file's row order
  shuffled = dict(r, curvature=r["curvature"][::-1])
  np.testing.assert_allclose(rules.peak_sharpness(shuffled, 0.5), s[4])
  early = dict(r, curvature=[dict(c, precond_sharpness=[1e6] * 8) if c["step"] == 3 else c
                             for c in r["curvature"]])
  np.testing.assert_allclose(rules.peak_sharpness_at(early), 0.3)
  with pytest.raises(ValueError, match="first_frac"):
    rules.peak_sharpness(r, 0.0)


def test_claim_f2_dose_response():
  runs = {}
  for i, (pe, c) in enumerate((("a", "multiplicative"), ("b", "additive"))):
    runs[pe] = _run(pe, c, ratio=0.6 + 0.6 * i, speed=np.arange(8) % 4 + 1 + 4 * i, seed=i)
  res = rules.claim_f2(runs)
  assert res["verdict"] == "reproduced" and res["rho"] > 0.5 and res["n"] == 16
  runs["b"] = _run("b", "additive", ratio=0.3, speed=np.arange(8) % 4 + 5, seed=5)
  assert rules.claim_f2(runs)["verdict"] == "refuted"
  runs["b"] = _run("b", "additive", ratio=1.2, speed=5, plateaued=2)
  assert rules.claim_f2(runs)["verdict"].startswith("not testable")


def test_spearman_matches_scipy_with_ties_and_the_bootstrap_brackets_it():
  from scipy.stats import spearmanr
  rng = np.random.default_rng(0)
  x = rng.integers(0, 5, size=15).astype(float)  # ties
  y = x + rng.normal(size=15)
  assert stats.spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
  rho, lo, hi = stats.bootstrap_spearman_ci(x, y, resamples=2000)
  assert lo < rho < hi and -1 <= lo and hi <= 1
  with pytest.raises(ValueError):
    stats.bootstrap_spearman_ci(x[:2], y[:2])


@pytest.mark.long
def test_recorded_runs_feed_the_report_section(tmp_path):
  """End to end on the smoke preset: a sweep recording spectra and curvature
  writes what ``rules.load`` reads, and the report renders the section and
  its figures from those files alone."""
  import json
  import os
  import subprocess
  import sys
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
  pes = ("rope", "rope_additive")
  out = subprocess.run([sys.executable, "-m", "experiments.sweep", f"--pe={','.join(pes)}",
                        "--preset=smoke", "--seeds=2", "--steps=16", "--eval_every=8",
                        "--record_spectra=4", "--record_curvature=8"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
  assert out.returncode == 0, out.stderr[-3000:]
  root = tmp_path / "thesis"
  root.mkdir()
  for pe in pes:
    os.symlink(tmp_path / "runs" / "distance" / f"{pe}-smoke-steps16", root / pe)
  sys.path.insert(0, repo)
  from studies.arxiv_2505_13027 import report, report_thesis
  truns = report_thesis.load_thesis(str(root))
  assert list(truns) == ["rope", "rope_additive"]
  for r in truns.values():
    assert len(r["curvature"]) == len(r["spectra"]) == len(r["metrics"]) == 2
    assert np.asarray(r["curvature"][0]["precond_sharpness"]).shape == (2,)
    assert rules.per_step_losses(r).shape == (2, 16)  # every step's batch loss
    np.testing.assert_allclose(rules.per_step_losses(r).mean(1),
                               [np.mean([m["train_loss"][s] for m in r["metrics"]])
                                for s in range(2)], rtol=1e-4)
  ratio = {pe: rules.ratio_over_training(r) for pe, r in truns.items()}
  assert (ratio["rope"] != 1).any()            # contraction ratio vs θ = 0
  assert (ratio["rope_additive"] != 1).any()   # widening ratio vs no bias
  lines = report_thesis.thesis_section(truns, str(tmp_path / "fig"), str(tmp_path))
  text = "\n".join(lines)
  assert "| rope | multiplicative |" in text and "| rope_additive | additive |" in text
  for name in ("curves", "ratio", "sharpness", "scatter"):
    assert os.path.getsize(tmp_path / "fig" / f"thesis_{name}.png") > 1000
  rows = {r[0]: r[3] for r in report.thesis_claims(truns)}
  assert rows["g"] == "not run" and rows["e"] == "inconclusive"  # two of four PEs
  json.dumps(lines)
  # A second configuration (the Task 2 runs): its own sub-section, figures
  # under its own names, and verdict rows without (g), labelled with it.
  assert report_thesis.thesis_task_label(truns) == "Task 1"
  count_cfg = {pe: dict(r, config={"run": {"task": {"name": "count", "seq_len": 48,
                                                    "count_max": 40},
                                           "model": {"dropout": 0.0}}})
               for pe, r in truns.items()}
  label = report_thesis.thesis_task_label(count_cfg)
  assert label == "Task 2 (counting, 48 tokens, counts 0–40), dropout 0"
  sub = report_thesis.thesis_section(truns, str(tmp_path / "fig"), str(tmp_path),
                                     task=label, slug="count", heading=False)
  assert sub[0] == f"### The 2×2 design on {label}"
  assert not any(line.startswith("## ") or "frequencies" in line for line in sub)
  for name in ("curves", "ratio", "sharpness", "scatter"):
    assert os.path.getsize(tmp_path / "fig" / f"thesis_count_{name}.png") > 1000
  trows = report._thesis_rows(truns, [], {}, task="count", label=label,
                              with_g=False)
  assert [r.split(")")[0] for r in trows] == ["| (e", "| (f", "| (f2"]
  assert all(label in r for r in trows)
  assert all(r.count(" | ") == 7 for r in trows)  # the verdict table's 8 columns


def _ablation(pattern, seeds=8, layers=2, heads=4, seed=0):
  """Drops [seeds, layers, heads]: 'deposit' = one layer-0 head carries it."""
  rng = np.random.default_rng(seed)
  d = 0.02 + 0.01 * rng.random((seeds, layers, heads))
  if pattern == "deposit":
    d[:, 0, 1] = 0.5
  return {"drop": d.tolist(), "seeds": list(range(seeds))}


def test_deposit_rule_against_a_hand_computed_case():
  from studies.arxiv_2505_13027.claims import deposit_rule
  drop = np.zeros((3, 4, 3))
  drop[0, 1, 2], drop[0, 1, 0] = 0.30, 0.10   # layer 1: 30 >= 3 x 10 points: holds
  drop[1, 0, 0], drop[1, 0, 1] = 0.30, 0.11   # 30 < 33: no
  drop[1, 2, 0] = 0.9                         # a late layer (2 of 4) does not count
  drop[2, 0, 0], drop[2, 0, 1] = 0.05, -0.2   # second negative -> 0: holds
  r = deposit_rule({"drop": drop.tolist()})
  assert r["early_layers"] == 2 and r["per_seed"] == [True, False, True]
  assert r["layer"] == [1, None, 0] and r["fraction"] == pytest.approx(2 / 3)
  with pytest.raises(ValueError, match="heads >= 2"):
    deposit_rule({"drop": np.zeros((2, 2, 1)).tolist()})


def test_claim_g_reproduced_refuted_inconclusive_not_run():
  mult = {pe: _ablation("deposit", seed=i) for i, pe in enumerate(rules.G_MULTIPLICATIVE)}
  add = {pe: _ablation("flat", seed=9 + i) for i, pe in enumerate(rules.G_ADDITIVE)}
  r = rules.claim_g({**mult, **add}, resamples=2000)
  assert r["verdict"] == "reproduced" and r["multiplicative"] == 1 and r["additive"] == 0
  assert 0 < r["lo"] <= r["diff"] <= r["hi"]
  swapped = {**{pe: _ablation("flat") for pe in rules.G_MULTIPLICATIVE},
             **{pe: _ablation("deposit") for pe in rules.G_ADDITIVE}}
  assert rules.claim_g(swapped, resamples=2000)["verdict"] == "refuted"
  # half the seeds of every PE hit: no difference to find
  half = {"drop": np.concatenate([np.asarray(_ablation("deposit", seeds=4)["drop"]),
                                  np.asarray(_ablation("flat", seeds=4)["drop"])]).tolist()}
  same = {pe: half for pe in rules.G_MULTIPLICATIVE + rules.G_ADDITIVE}
  r = rules.claim_g(same, resamples=2000)
  assert r["verdict"] == "inconclusive" and r["diff"] == 0 and r["lo"] < 0 < r["hi"]
  partial = {pe: a for pe, a in {**mult, **add}.items() if pe != "kerple_log"}
  r = rules.claim_g(partial)
  assert r["verdict"] == "not run" and r["missing"] == ["kerple_log"]
  conv = {pe: pe != "xpos" for pe in mult | add}
  r = rules.claim_g({**mult, **add}, converged=conv, resamples=500)
  assert r["verdict"] == "inconclusive (not converged: xpos)" and r["diff"] == 1
  assert r["unconverged"] == ["xpos"]


def test_claim_g_an_unconverged_run_fixes_the_label_with_runs_missing():
  """Ninth amendment: a committed run that did not converge makes (g)
  'inconclusive (not converged)' whatever the missing runs show, so the label
  is given at once, the missing PEs still listed and no CI computed; with
  every present run converged it stays 'not run'."""
  present = {"rope": _ablation("deposit", seed=0), "alibi": _ablation("flat", seed=1),
             "xpos": _ablation("deposit", seed=2)}
  conv = {"rope": True, "alibi": False, "xpos": False}
  r = rules.claim_g(present, converged=conv)
  # the plan's order (multiplicative, then additive), not the dict's
  assert r["verdict"] == "inconclusive (not converged: xpos, alibi)"
  assert r["unconverged"] == ["xpos", "alibi"]
  assert r["missing"] == ["p_rope", "alibi_multiplicative", "rope_additive", "relative",
                          "kerple_log"]
  assert "diff" not in r and r["fractions"] == {"rope": 1.0, "alibi": 0.0, "xpos": 1.0}
  r = rules.claim_g(present, converged={pe: True for pe in present})
  assert r["verdict"] == "not run" and r["unconverged"] == []
  # the report's (g) row, from committed deposit runs: fractions marked, and the
  # missing runs named by the plan as unable to change the label
  from studies.arxiv_2505_13027 import report
  dep = lambda pe, plateaued, pattern: {
      "task": "distance", "pe": pe, "preset": "deposit", "faithful": False,
      "seeds": list(range(8)), "test_accuracy": [0.5] * 8, "ablation": _ablation(pattern),
      "plateau": {"per_seed": [True] * plateaued + [False] * (8 - plateaued)}}
  runs = [dep("rope", 8, "deposit"), dep("alibi", 0, "flat")]
  g = {r[0]: r for r in report.thesis_claims({}, runs)}["g"]
  assert g[3] == "inconclusive (not converged: alibi)"
  assert g[2].startswith("committed: rope 100 %, alibi 0 % (not converged); not run yet "
                         "(they cannot change this: alibi did not converge): "
                         "`distance/alibi_multiplicative-deposit` (P2), ")
  assert "`distance/xpos-deposit` (P2)" in g[2] and "waits for" not in g[2]
  ok = {r[0]: r for r in report.thesis_claims({}, [runs[0], dep("alibi", 8, "flat")])}["g"]
  assert ok[3] == "not run" and "; waits for `distance/alibi_multiplicative-deposit`" in ok[2]
  assert "(not converged)" not in ok[2]
  # whatever the missing runs would have shown, the label is the one given early
  full = {pe: _ablation("deposit" if pe in rules.G_MULTIPLICATIVE else "flat", seed=i)
          for i, pe in enumerate(rules.G_MULTIPLICATIVE + rules.G_ADDITIVE)}
  full_conv = {pe: conv.get(pe, True) for pe in full}
  assert (rules.claim_g(full, converged=full_conv, resamples=500)["verdict"]
          == rules.claim_g(present, converged=conv)["verdict"])


def test_a_pair_that_fails_at_the_last_rung_is_not_testable():
  """studies/arxiv_2505_13027/study.md, seventh amendment: a member that did not converge at
  LAST_RUNG_EPOCHS, judged or waiting for its partner, makes its pair's
  unconverged (f) *not testable at this scale*; below the last rung, or when
  the last-rung run converged, the rules are unchanged."""
  from studies.arxiv_2505_13027.claims import Outcome
  NOT_TESTABLE = Outcome.NOT_TESTABLE.value  # the text a verdict reads as
  last = rules.LAST_RUNG_EPOCHS
  four = {pe: _with_budget(r, 64) for pe, r in _four().items()}
  slow64 = _with_budget(_run("rope_additive", "additive", ratio=1.2, speed=5, plateaued=1,
                             seeds=5), 64)
  judged = dict(four, rope_additive=slow64)
  assert rules.claim_f(judged)["pairs"]["rotary"]["verdict"] == "inconclusive (not converged)"
  # rope_additive at the last rung, alone (rope not run there): it judges nothing, yet
  slow_last = _with_budget(_run("rope_additive", "additive", ratio=1.2, speed=5, plateaued=2,
                                seeds=5), last)
  res = rules.claim_f(judged, [{"rope_additive": slow_last}])
  v = res["pairs"]["rotary"]["verdict"]
  assert v == (f"{NOT_TESTABLE} (rope_additive did not converge at {last} epochs: "
               "2/5 seeds plateaued)")
  assert res["pairs"]["decay"]["verdict"] == "reproduced"
  assert res["verdict"].startswith("inconclusive (rotary: " + NOT_TESTABLE)
  # converged at the last rung: the pair waits for rope there, still not converged at 64
  ok_last = _with_budget(_run("rope_additive", "additive", ratio=1.2, speed=5, plateaued=5,
                              seeds=5), last)
  assert rules.claim_f(judged, [{"rope_additive": ok_last}])["pairs"]["rotary"][
      "verdict"] == "inconclusive (not converged)"
  # a budget below the last rung changes nothing
  slow96 = _with_budget(slow_last, last - 32)
  assert rules.claim_f(judged, [{"rope_additive": slow96}])["pairs"]["rotary"][
      "verdict"] == "inconclusive (not converged)"
  # both members judged at the last rung, rope the one that failed
  both = dict(four, rope=_with_budget(_run("rope", "multiplicative", ratio=0.8, speed=2,
                                           plateaued=3, seeds=5), last),
              rope_additive=ok_last)
  assert "rope did not converge at" in rules.claim_f(both)["pairs"]["rotary"]["verdict"]
  # a converged pair at the last rung is decided on its numbers
  assert rules.claim_f(dict(four, rope=_with_budget(four["rope"], last),
                             rope_additive=ok_last))["pairs"]["rotary"]["verdict"] == \
      "reproduced"
  # every pair not testable: so is (f)
  dec = {pe: _with_budget(_run(pe, c, ratio=1.0, speed=3, plateaued=1, seeds=5), last)
         for pe, c in (("alibi_multiplicative", "multiplicative"), ("alibi", "additive"))}
  assert rules.claim_f({**judged, **dec}, [{"rope_additive": slow_last}])["verdict"] == \
      NOT_TESTABLE
  # the report hands its superseded budgets to (f)
  from studies.arxiv_2505_13027 import report
  rows = {r[0]: r for r in report.thesis_claims(judged, with_g=False,
                                                 superseded=[{"rope_additive": slow_last}])}
  assert f"rotary: {NOT_TESTABLE} (rope_additive did not converge" in rows["f"][3]
  assert "rotary: inconclusive (not converged)" in report.thesis_claims(judged, with_g=False)[1][3]


def test_claim_g_groups_are_the_registered_pes_split_by_the_registrys_coupling():
  """(g)'s two groups: the eight PEs study.md registered, each on the side its
  declared coupling puts it (a PE whose coupling changed would move, and this
  would fail against the registration)."""
  from pe_spectral.pe import encodings
  assert rules.G_MULTIPLICATIVE == ("rope", "xpos", "p_rope", "alibi_multiplicative")
  assert rules.G_ADDITIVE == ("alibi", "rope_additive", "relative", "kerple_log")
  for pe in rules.G_MULTIPLICATIVE:
    assert encodings.get(pe).coupling == "multiplicative"
  for pe in rules.G_ADDITIVE:
    assert encodings.get(pe).coupling == "additive"


def test_one_convergence_rule_for_claims_and_thesis():
  """claims.enough_plateaued is the rule both modules apply: >= 2/3 of the
  seeds, checked against exact fractions for every seed count up to 40."""
  from fractions import Fraction

  from studies.arxiv_2505_13027 import claims
  for n in range(1, 41):
    for k in range(n + 1):
      per = [True] * k + [False] * (n - k)
      want = Fraction(k, n) >= Fraction(2, 3)
      assert claims.enough_plateaued(per) is want
      run = {"summary": {"plateau": {"per_seed": per}}}
      assert rules.thesis_converged(run) is want
      assert claims.converged({"plateau": {"per_seed": per}}) is want
  assert claims.enough_plateaued([]) is False

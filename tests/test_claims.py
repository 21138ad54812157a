"""The paper's claims as a library (studies.arxiv_2505_13027.claims) on hand-made run
records: reproduced, refuted, inconclusive and not-converged cases, without
files or markdown."""
import os

import numpy as np
import pytest

from studies.arxiv_2505_13027 import claims as C


def _run(pe, acc, *, task="distance", preset="study", faithful=False, plateaued=8,
         rope_heads=None, seeds=8, jitter=0.2, seed=0, ablation=None):
  rng = np.random.default_rng(seed)
  r = {"task": task, "pe": pe, "preset": preset, "faithful": faithful,
       "seeds": list(range(seeds)),
       "test_accuracy": ((acc + jitter * rng.normal(size=seeds)) / 100).tolist(),
       "plateau": {"per_seed": [True] * plateaued + [False] * (seeds - plateaued)}}
  if rope_heads is not None:
    r["rope_heads"] = rope_heads
  if ablation is not None:
    r["ablation"] = ablation
  return r


def _by_id(runs, cid, mode="clean"):
  return next(c for c in C.claims(runs) if c["id"] == cid and c["mode"] == mode)


def test_claim_a_reproduced_refuted_and_not_converged():
  rivals = [pe for pe in C.CLAIM_PES["task1"] if pe != "rope"]
  win = [_run("rope", 97.0)] + [_run(pe, 90.0 - i, seed=1 + i) for i, pe in enumerate(rivals)]
  a = _by_id(win, "a")
  assert a["verdict"] == "reproduced" and len(a["rows"]) == len(rivals) and not a["missing"]
  # every comparison made so far won, but a rival is still to run: not reproduced yet
  a = _by_id(win[:3], "a")
  assert a["verdict"] == C.RIVALS_MISSING and len(a["rows"]) == 2
  assert [s.pe for s in a["missing"]] == rivals[2:]
  assert C.cannot_change(a) is None  # the missing rivals can still refute it
  lose = [_run("rope", 97.0), _run("learned", 98.0, seed=2)]
  assert _by_id(lose, "a")["verdict"] == "refuted"
  slow = [_run("rope", 97.0), _run("learned", 90.0, plateaued=3, seed=2)]
  row = _by_id(slow, "a")["rows"][0][1]
  assert _by_id(slow, "a")["verdict"] == "inconclusive"
  assert row["raw_verdict"] == "reproduced" and not row["converged"]
  assert _by_id([], "a")["verdict"] == "not run"


def test_claim_a2_close_margin_is_mirrored():
  close = [_run("rope", 97.0), _run("partial_rope", 95.0, rope_heads=1, seed=3)]
  assert _by_id(close, "a2")["verdict"] == "reproduced"   # within 5 points
  far = [_run("rope", 97.0), _run("partial_rope", 70.0, rope_heads=1, seed=3)]
  assert _by_id(far, "a2")["verdict"] == "refuted"


def test_claim_b_needs_both_comparisons():
  t2 = dict(task="count")
  runs = [_run("mla", 97.0, **t2), _run("nope", 78.0, seed=1, **t2),
          _run("rope", 69.0, seed=2, **t2)]
  assert _by_id(runs, "b")["verdict"] == "reproduced"
  assert _by_id(runs[:2], "b")["verdict"] == "not run"
  # the row names the run it waits for, by the fields find() looks it up by
  assert _by_id(runs, "b")["missing"] == []
  assert _by_id(runs[:2], "b")["missing"] == [C.run_spec("count", "rope", preset="study")]
  assert [s.pe for s in _by_id(runs[1:2], "d")["missing"]] == [
      "rope", "rope_sinusoidal", "sinusoidal"]
  assert _by_id(runs[1:], "a2")["missing"] == [
      C.run_spec("distance", "rope", preset="study"),
      C.run_spec("distance", "partial_rope", preset="study", rope_heads=1)]
  swapped = [_run("mla", 70.0, **t2), _run("nope", 78.0, seed=1, **t2),
             _run("rope", 69.0, seed=2, **t2)]
  assert _by_id(swapped, "b")["verdict"] == "refuted"


def test_claim_c_deposit_verdicts():
  def abl(deposit, seeds=8):
    d = np.full((seeds, 4, 8), 0.02)
    if deposit:
      d[:, 0, 3] = 0.3
    return {"drop": d.tolist()}
  dep = dict(preset="deposit")
  good = [_run("rope", 90, ablation=abl(True), **dep),
          _run("nope", 10, ablation=abl(False), **dep),
          _run("alibi", 50, ablation=abl(False), **dep),
          _run("mla", 90, ablation=abl(False), **dep)]
  assert _by_id(good, "c")["verdict"] == "reproduced"
  assert _by_id(good[:2], "c")["verdict"] == "inconclusive (controls missing)"
  no_deposit = [_run("rope", 90, ablation=abl(False), **dep)] + good[1:]
  assert _by_id(no_deposit, "c")["verdict"] == "refuted"
  # the reference alone refutes when it falls short: no control can undo that
  assert _by_id(no_deposit[:1], "c")["verdict"] == "refuted"
  nope_too = good[:1] + [_run("nope", 10, ablation=abl(True), **dep)] + good[2:]
  assert _by_id(nope_too, "c")["verdict"] == "refuted"


def test_find_picks_the_plan_run_and_long_preset_takes_over():
  plan = _run("rope", 97.0)
  long = _run("rope", 97.5, preset="long")
  assert C.find([plan, long], "distance", "rope", preset="study") is plan
  assert C.claim_preset([plan, long], "distance", "rope", False) == "long"
  assert C.claim_preset([plan], "distance", "rope", False) == "study"
  assert C.find([plan], "distance", "rope", preset="study", faithful=True) is None


def test_a_long_row_judges_and_the_study_row_stays_beside_it():
  """Once the reference run exists at ``long``, (a) is judged there against
  the other long runs only; the study row, with its own comparisons, stays in
  the table marked as not judging (a long group of fewer PEs must not hide
  what the study found)."""
  study = [_run("rope", 97.0), _run("learned", 98.0, seed=2), _run("alibi", 40.0, seed=3)]
  long = [_run("rope", 97.5, preset="long", seed=4), _run("alibi", 60.0, preset="long", seed=5)]
  rows = [c for c in C.claims(study + long) if c["id"] == "a" and c["mode"] == "clean"]
  assert [(c["preset"], c["judged"]) for c in rows] == [("study", False), ("long", True)]
  assert rows[0]["verdict"] == "refuted" and len(rows[0]["rows"]) == 2   # learned beats rope
  # only alibi at long so far: won, but the other rivals are still to run there
  assert rows[1]["verdict"] == C.RIVALS_MISSING and len(rows[1]["rows"]) == 1
  only = [c for c in C.claims(study) if c["id"] == "a" and c["mode"] == "clean"]
  assert [(c["preset"], c["judged"]) for c in only] == [("study", True)]
  # (a2) follows its own reference: partial RoPE at long without full RoPE there
  a2 = [c for c in C.claims(study + [_run("partial_rope", 70.0, rope_heads=1, preset="long")])
        if c["id"] == "a2" and c["mode"] == "clean"]
  assert [c["preset"] for c in a2] == ["study"]


def test_not_testable_at_the_largest_budget_only_when_nothing_else_decides():
  """At ``long`` (the plan's largest Task 1 budget) a claim undecided only
  because runs did not converge is 'not testable at this scale', naming those
  runs; not while a run it needs is missing, not at ``study``, not when a
  converged comparison refutes it or is merely too wide to decide."""
  L = dict(preset="long")
  _long = lambda runs, cid: next(c for c in C.claims(runs) if c["id"] == cid
                                 and c["mode"] == "clean" and c["preset"] == "long")
  part = _run("partial_rope", 70.0, rope_heads=1, plateaued=1, seed=3, **L)
  a2 = _long([_run("rope", 97.0, **L), part], "a2")
  assert a2["preset"] == "long" and a2["missing"] == []
  assert a2["verdict"] == ("not testable at this scale (partial_rope (k=1) did not converge "
                           "at long: 1/8 seeds plateaued)")
  assert a2["verdict"].outcome is C.Outcome.NOT_TESTABLE
  # the same runs at study: the plan has a longer budget, so it is only inconclusive
  at_study = [_run("rope", 97.0), dict(part, preset="study")]
  assert _by_id(at_study, "a2")["verdict"] == "inconclusive"
  # (a) at long: every other PE of the plan's Task 1 set must be there first
  others = [pe for pe in C.CLAIM_PES["task1"] if pe != "rope"]
  rivals = [_run(pe, 40.0 if pe == "alibi" else 60.0, plateaued=2 if pe == "alibi" else 8,
                 seed=10 + i, **L) for i, pe in enumerate(others)]
  ref = _run("rope", 97.0, **L)
  assert _long([ref] + rivals[:-1], "a")["verdict"] == "inconclusive"  # mla pending
  assert [m.pe for m in _long([ref] + rivals[:-1], "a")["missing"]] == ["mla"]
  full = _long([ref] + rivals, "a")
  assert full["missing"] == []
  assert full["verdict"] == ("not testable at this scale (alibi did not converge at long: "
                             "2/8 seeds plateaued)")
  # a converged rival that beats RoPE refutes the claim whatever the rest did
  beaten = [ref] + rivals[:-1] + [_run("mla", 98.5, seed=30, **L)]
  assert _long(beaten, "a")["verdict"] == "refuted"
  # a converged comparison that decides nothing keeps it inconclusive
  tie = [ref] + rivals[:-1] + [_run("mla", 97.0, seed=31, jitter=3.0, **L)]
  assert _long(tie, "a")["verdict"] == "inconclusive"
  # all converged and all won: reproduced, as at any budget
  won = [ref] + [dict(r, plateau={"per_seed": [True] * 8}) for r in rivals]
  assert _long(won, "a")["verdict"] == "reproduced"


def test_an_unconverged_reference_at_the_largest_budget_is_not_testable_at_once():
  """Eighth amendment: every comparison includes the reference, so once it did
  not converge at ``long`` no missing rival can change the label; the row
  says so at once (still listing what is missing), each column by its own
  rule, and only at ``long``."""
  L = dict(preset="long")
  _long = lambda runs, cid: next(c for c in C.claims(runs) if c["id"] == cid
                                 and c["mode"] == "clean" and c["preset"] == "long")
  ref = _run("rope", 90.0, plateaued=2, **L)
  rivals = [_run("alibi", 40.0, seed=11, **L), _run("learned", 99.0, seed=12, **L)]
  a = _long([ref] + rivals, "a")
  assert a["verdict"] == ("not testable at this scale (rope did not converge at long: "
                          "2/8 seeds plateaued)")
  assert len(a["missing"]) == len(C.CLAIM_PES["task1"]) - 3  # still listed
  assert _long([ref], "a")["verdict"].outcome is C.Outcome.NOT_TESTABLE  # no rival at all
  # a converged reference is judged as before, missing rivals or not: a converged
  # refutation decides, a converged tie keeps it inconclusive
  conv = dict(ref, plateau={"per_seed": [True] * 8})
  assert _long([conv] + rivals, "a")["verdict"] == "refuted"  # learned beats it
  tie = _run("learned", 90.0, seed=12, jitter=3.0, **L)
  assert _long([conv, rivals[0], tie], "a")["verdict"] == "inconclusive"
  # the same unconverged reference at study: inconclusive, the plan has a longer budget
  assert _by_id([dict(ref, preset="study")] + [dict(r, preset="study") for r in rivals],
                "a")["verdict"] == "inconclusive"
  # (a2): its full-RoPE run is the reference; partial RoPE still missing
  assert _long([ref], "a2")["verdict"].outcome is C.Outcome.NOT_TESTABLE
  # the test-accuracy column uses its own rule: no records, no test plateau
  assert a["verdict_test_rule"].outcome is C.Outcome.NOT_TESTABLE


def test_compare_is_paired_on_shared_seeds():
  a = _run("rope", 90.0, jitter=0.0)
  b = _run("nope", 80.0, jitter=0.0, seeds=5)
  p = C.compare(a, b)
  assert p["n"] == 5 and p["mean"] == pytest.approx(10.0) and p["verdict"] == "reproduced"


def _with_records(r, train_flat: bool, test_flat: bool, evals=9):
  """Metrics rows: train/test accuracy either flat over the last third or
  still moving by 5 points per evaluation there."""
  seeds = len(r["seeds"])
  rows = []
  for e in range(evals):
    late = max(0, e - 2 * evals // 3)
    move = lambda flat: 0.0 if flat else 0.05 * late
    rows.append({"step": e + 1, "examples_seen": 100 * (e + 1),
                 "train_accuracy": [0.5 + move(train_flat)] * seeds,
                 "test_accuracy": [0.4 + move(test_flat)] * seeds})
  return dict(r, records=rows)


def test_second_convergence_rule_judges_test_accuracy():
  """The plateau rule's false negative (NoPE memorising at a flat test
  accuracy): the second rule (test accuracy within 2 points over the last
  third) counts it converged; the verdict keeps the first rule, the second
  is reported beside it."""
  memorising = _with_records(_run("nope", 10.0, seed=1), train_flat=False, test_flat=True)
  assert not C.converged(memorising) and C.converged_by_test_accuracy(memorising)
  rope = _with_records(_run("rope", 97.0), train_flat=True, test_flat=True)
  # every other rival present, converged by both rules and beaten
  beaten = [_with_records(_run(pe, 80.0, seed=10 + i), train_flat=True, test_flat=True)
            for i, pe in enumerate(C.CLAIM_PES["task1"]) if pe not in ("rope", "nope")]
  a = _by_id([rope, memorising] + beaten, "a")
  assert not a["missing"]
  assert a["verdict"] == "inconclusive" and a["verdict_test_rule"] == "reproduced"
  rising = _with_records(_run("nope", 10.0, seed=1), train_flat=True, test_flat=False)
  assert C.converged(rising) and not C.converged_by_test_accuracy(rising)
  a = _by_id([rope, rising] + beaten, "a")
  assert a["verdict"] == "reproduced" and a["verdict_test_rule"] == "inconclusive"
  # with a rival missing, each column says so where it would reproduce
  a = _by_id([rope, memorising] + beaten[1:], "a")
  assert a["verdict"] == "inconclusive" and a["verdict_test_rule"] == C.RIVALS_MISSING
  # a tolerance of 2 points: a last-third wobble of 1.5 points still plateaus
  wobble = dict(memorising, records=[dict(x, test_accuracy=[v + (0.015 if i == 7 else 0)
                                                           for v in x["test_accuracy"]])
                                     for i, x in enumerate(memorising["records"])])
  assert C.converged_by_test_accuracy(wobble)
  assert not C.converged_by_test_accuracy(_run("nope", 10.0))  # no metrics: not judged


def _with_config(r, **model):
  """``r`` with the config.json its preset gives, the ``model`` fields set."""
  from pe_spectral.training import config as configs
  rc = configs.build(r["preset"], r["task"], r["pe"], faithful=r["faithful"]).to_dict()
  rc["model"].update(model)
  return {**r, "config": {"run": rc}}


def test_config_variant_names_what_a_run_set_away_from_its_preset():
  r = _run("rope", 90.0, task="count")
  assert C.config_variant(r) == {} and C.preset_label(r) == "study"  # no config: the plan's
  assert C.config_variant(_with_config(r)) == {}
  v = _with_config(r, dropout=0.0)
  assert C.config_variant(v) == {"model.dropout": 0.0}
  assert C.preset_label(v) == "study, dropout 0"
  # the memory options compute the same model: not another experiment
  assert C.config_variant(_with_config(r, remat=True, attention_block=16)) == {}
  two = _with_config(r, dropout=0.25, d_ff=256)
  assert C.variant_label(C.config_variant(two)) == "d_ff 256, dropout 0.25"
  # a longer budget and a shorter task are variants too; the label says which
  longer = _with_config(r, dropout=0.0)
  longer["config"]["run"]["train"]["epochs"] = 40
  longer["config"]["run"]["task"]["seq_len"] = 80
  assert C.config_variant(longer) == {"model.dropout": 0.0, "task.seq_len": 80,
                                      "train.epochs": 40}
  assert C.variant_label(C.config_variant(longer)) == "dropout 0, seq_len 80, epochs 40"
  assert C.preset_label({**longer, "steps": 4360}) == \
      "study (batch 128, 4360 steps), dropout 0, seq_len 80"
  assert C.find([longer], "count", "rope", preset="study") is None
  assert C.find([longer], "count", "rope", preset="study",
                variant=C.config_variant(longer)) is longer


def test_every_committed_run_is_its_presets_own():
  """The committed study runs (old and new config.json formats) read as the
  plan's runs or a registered configuration's, so no verdict loses them."""
  import glob
  import json
  import os
  root = os.path.join(os.path.dirname(__file__), "..", "studies", "arxiv_2505_13027",
                      "results", "runs")
  paths = sorted(glob.glob(os.path.join(root, "*", "*", "config.json")))
  assert len(paths) >= 20
  for p in paths:
    with open(p) as f:
      cfg = json.load(f)
    with open(os.path.join(os.path.dirname(p), "summary.json")) as f:
      s = json.load(f)
    r = {"task": s["task"], "pe": s["pe"], "preset": cfg["run"]["preset"],
         "faithful": s["faithful"], "config": cfg}
    v = C.config_variant(r)  # the preset's own, or a registered configuration's
    assert v == {} or (r["preset"], v) in C.TASK2_CONFIGS, (p, v)


def test_task2_claims_are_judged_per_registered_configuration():
  t2 = dict(task="count")
  (preset, variant), cpu = C.TASK2_CONFIGS
  assert cpu[0] == "study" and cpu[1]["task.seq_len"] == 80  # the CPU's: rows of its own
  fields = {k.split(".", 1)[1]: v for k, v in variant.items()}
  study = [_run("mla", 97.0, **t2), _run("nope", 78.0, seed=1, **t2),
           _run("rope", 69.0, seed=2, **t2)]
  drop0 = [_with_config(_run(pe, acc, seed=s, preset=preset, **t2), **fields)
           for pe, acc, s in (("mla", 90.0, 3), ("nope", 95.0, 4), ("rope", 99.0, 5))]
  cl = [c for c in C.claims(study + drop0) if c["id"] == "b" and c["mode"] == "clean"]
  assert [(c["preset"], c["variant"]) for c in cl] == [
      ("study", ""), (preset, "dropout 0"),
      ("study", "dropout 0, count_max 66, max_len 80, seq_len 80, epochs 40")]
  assert cl[2]["verdict"] == "not run"
  assert cl[0]["verdict"] == "reproduced"  # the study preset's runs only
  assert cl[1]["verdict"] == "refuted"     # MLA < NoPE < RoPE without dropout
  assert cl[1]["rows"][1][1]["mean"] < 0   # nope − rope
  d = [c for c in C.claims(drop0) if c["id"] == "d" and c["variant"] == "dropout 0"][0]
  assert d["rows"][0][0] == "nope − rope" and "NoPE worse" in d["verdict"]
  # the comparisons not run yet are named, so the partial row does not read as whole
  assert d["verdict"].endswith("nope − rope_sinusoidal: not run; nope − sinusoidal: not run")
  assert "nope − rope_sinusoidal: not run; nope − sinusoidal: not run" in d["verdict_test_rule"]
  # the variant runs never stand in for the preset's own: those rows stay unrun
  assert [c["verdict"] for c in C.claims(drop0)
          if c["id"] == "b" and c["variant"] == "" and c["mode"] == "clean"] == ["not run"]


def test_faithful_task2_rows_without_runs_are_labelled_by_the_pilots():
  """studies/arxiv_2505_13027/study.md, sixth amendment: a faithful (b)/(d) row with none of its
  runs reads *not testable at this scale* when no faithful Task 2 pilot
  converged, naming them; each column by its own convergence rule."""
  t2 = dict(task="count", faithful=True)
  slow = _with_records(_run("rope_sinusoidal", 60.0, seeds=2, **t2), train_flat=False,
                       test_flat=False)
  slow["seeds"] = [8, 9]
  flat_test = _with_records(_run("rope_sinusoidal", 70.0, seeds=2, seed=1, **t2),
                            train_flat=False, test_flat=True)
  verdicts = lambda runs, pilots: {(c["id"], c["mode"]): (c["verdict"], c["verdict_test_rule"])
                                   for c in C.claims(runs, pilots) if c["id"] in ("b", "d")
                                   and c["preset"] == "study" and not c.get("variant")}
  v = verdicts([], [slow])
  for cid in ("b", "d"):
    assert v[(cid, "faithful")][0].outcome is C.Outcome.NOT_TESTABLE
    assert "seeds 8–9: 0/2 seeds plateaued" in v[(cid, "faithful")][0]
    assert v[(cid, "clean")] == ("not run", "not run")  # the pilots are faithful mode's only
  assert verdicts([], [])[("b", "faithful")] == ("not run", "not run")
  # a pilot that converged (here by the test-accuracy rule only) leaves that column "not run"
  v = verdicts([], [slow, flat_test])
  assert v[("b", "faithful")][0].outcome is C.Outcome.NOT_TESTABLE
  assert v[("b", "faithful")][1] == "not run"
  # a clean pilot or a Task 1 pilot labels nothing
  clean = dict(slow, faithful=False)
  task1 = dict(slow, task="distance")
  assert verdicts([], [clean, task1])[("d", "faithful")] == ("not run", "not run")
  # once one of a row's runs is committed, the usual rules judge it
  one = _run("nope", 70.0, **t2)
  v = verdicts([one], [slow])
  assert v[("b", "faithful")] == ("not run", "not run")
  assert v[("d", "faithful")][0] == "not run"
  # the pilots' budgets, shortest first, as the verdict names them
  short = dict(slow, examples_seen=10)
  long_ = dict(slow, examples_seen=20, seeds=[3, 5])
  assert [p["seeds"] for p in C.faithful_task2_pilots([long_, short])] == [[8, 9], [3, 5]]
  assert "seeds 3, 5" in C.pilot_txt(long_)


def _drops(deposit: bool, seeds=8, layers=2, heads=4):
  """Single-head knock-out drops: one layer-0 head carries 50 points, or all
  heads 2 points (no head stands out)."""
  d = np.full((seeds, layers, heads), 0.02)
  if deposit:
    d[:, 0, 1] = 0.5
  return {"drop": d.tolist(), "seeds": list(range(seeds))}


def test_cannot_change_and_waiting_name_the_runs_no_verdict_needs():
  """A refutation, an unconverged Task 1 reference at the largest budget
  (eighth amendment) and an unconverged (g) run (ninth amendment) fix a row's
  verdict, so the runs it still lists cannot change it; anything else --
  a row that waits, a Task 2 row not testable from pilots -- can still
  change. waiting() gives every listed run once per row, with that reason."""
  from studies.arxiv_2505_13027 import claims as rules
  lose = [_run("rope", 97.0), _run("learned", 98.0, seed=2)]
  assert C.cannot_change(_by_id(lose, "a")) == C.REFUTATION
  assert C.cannot_change(_by_id(lose[:1], "a")) is None  # waits: no comparison yet
  ref = _run("rope", 90.0, plateaued=2, preset="long")
  a_long = next(c for c in C.claims([ref])
                if c["id"] == "a" and c["mode"] == "clean" and c["preset"] == "long")
  assert a_long["missing"] and C.cannot_change(a_long) == "the reference did not converge"
  assert C.cannot_change({"id": "b", "verdict": C.Verdict(C.Outcome.NOT_TESTABLE,
                                                                   "pilots")}) is None
  # once the long reference exists the study row no longer judges: its missing runs
  # cannot change the verdict, whatever the study row shows
  study_ref = _run("rope", 97.0)
  a_study = next(c for c in C.claims([study_ref, ref])
                 if c["id"] == "a" and c["mode"] == "clean" and c["preset"] == "study")
  assert a_study["judged"] is False and a_study["missing"]
  assert C.cannot_change(a_study) == "the long row judges this claim"
  assert C.cannot_change(_by_id([study_ref], "a")) is None  # no long run: study judges
  dep = lambda pe, plateaued, deposit: _run(pe, 50.0, preset="deposit", plateaued=plateaued,
                                            ablation=_drops(deposit))
  runs = [dep("rope", 8, True), dep("alibi", 0, False)]
  g = C.claim_g_of(runs)
  assert g["id"] == "g" and g["verdict"] == "inconclusive (not converged: alibi)"
  assert g["fractions"] == {"rope": 1.0, "alibi": 0.0}
  assert C.cannot_change(g) == "alibi did not converge"
  w = C.waiting(runs)
  rest = [pe for pe in rules.G_MULTIPLICATIVE + rules.G_ADDITIVE if pe not in ("rope", "alibi")]
  for pe in rest:  # only (g) waits for these, and it is settled
    assert [why for s, why in w if s == C.run_spec("distance", pe, preset="deposit")] == [
        "alibi did not converge"]
  # (c) clean waits for its NoPE and MLA controls and is not settled (rope has
  # its deposit in 8/8 seeds, ALiBi in none): those runs can still change it
  assert _by_id(runs, "c")["verdict"] == "inconclusive (controls missing)"
  for pe in ("nope", "mla"):
    assert [why for s, why in w if s == C.run_spec("distance", pe, preset="deposit")] == [None]
  # the same runs with ALiBi converged: (g) waits, nothing is settled by it
  runs_ok = [runs[0], dep("alibi", 8, False)]
  assert C.claim_g_of(runs_ok)["verdict"] == "not run"
  assert all(why is None for s, why in C.waiting(runs_ok)
             if s.preset == "deposit" and not s.faithful)


def test_verdicts_are_outcomes_with_reasons_never_parsed_text():
  """A Verdict reads as the report's text but carries its outcome and reason;
  every verdict the rules give on the committed runs is one (so no rule has
  to match a verdict by its words), and a NOT_TESTABLE one is found by its
  outcome whatever its reason says."""
  import copy
  import pickle
  V, O = C.Verdict, C.Outcome
  v = V(O.NOT_TESTABLE, "rope did not converge at long: 1/8 seeds plateaued")
  assert v == "not testable at this scale (rope did not converge at long: 1/8 seeds plateaued)"
  assert (v.outcome, v.reason) == (O.NOT_TESTABLE, "rope did not converge at long: 1/8 seeds "
                                                   "plateaued")
  assert V(O.OBSERVED, "nope − rope: NoPE better") == "nope − rope: NoPE better"
  assert V(O.INCONCLUSIVE) == "inconclusive" and V.of("refuted").outcome is O.REFUTED
  for twin in (copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
    assert twin == v and twin.outcome is O.NOT_TESTABLE and twin.reason == v.reason
  assert C.combine([V(O.REPRODUCED), V(O.REFUTED, "x")]).outcome is O.REFUTED
  assert C.combine([V(O.REPRODUCED), V(O.INCONCLUSIVE, "reproduced later")]) == "inconclusive"
  from pe_spectral.training import workdir
  from studies.arxiv_2505_13027 import RESULTS
  runs = workdir.load_runs(os.path.join(RESULTS, "runs"))
  rows = C.claims(runs)
  assert len(rows) >= 8
  for c in rows:
    for key in ("verdict", "verdict_test_rule"):
      assert isinstance(c[key], V), (c["id"], key, c[key])
      for _, p in c.get("rows", []):
        assert isinstance(p["verdict"], V)

"""studies/ruoss_2023: its rules on hand-made results (an oracle per rule)."""
import json
import os

from studies.ruoss_2023 import report as R


def _write(root, task, label, at, train=1.0, drop=None):
  d = os.path.join(root, task, label)
  os.makedirs(d)
  rows = [{"seq_len": n, "accuracy": list(acc)} for n, acc in at.items()]
  with open(os.path.join(d, "lengths.json"), "w") as f:
    json.dump({"seeds": [0, 1, 2, 3, 4], "lengths": rows}, f)
  with open(os.path.join(d, "summary.json"), "w") as f:
    json.dump({"train_accuracy": [train] * 5}, f)
  if drop is not None:
    with open(os.path.join(d, "ablation.json"), "w") as f:
      json.dump({"drop": drop}, f)


def test_deposit_rule_by_hand():
  # seed 0: 0.30 vs 0.05 (6x): hit; seed 1: 0.10 vs 0.05 (2x): no; seed 2: all <= 0: no
  drop = [[[0.30, 0.05, 0.0, 0.01], [0.9, 0.9, 0.9, 0.9]],
          [[0.10, 0.05, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
          [[0.0, -0.1, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]]]  # layer 1 is not early: ignored
  d = R.deposit({"drop": drop})
  assert d["per_seed"] == [True, False, False] and not d["present"]
  assert R.deposit({"drop": [drop[0]] * 3})["present"]


def test_q2_gate_and_paired_verdict(tmp_path):
  root = str(tmp_path)
  good = {40: [0.99] * 5}
  # randomized beats rope by 0.2 on every seed at every long length: reproduced
  _write(root, "even_pairs", "rope", {**good, 80: [0.5] * 5, 160: [0.5] * 5, 320: [0.5] * 5})
  _write(root, "even_pairs", "randomized",
         {**good, 80: [0.7, 0.71, 0.69, 0.7, 0.72], 160: [0.7] * 5, 320: [0.7] * 5})
  # below the gate at 40 tokens: not testable, whatever the long lengths say
  _write(root, "parity_check", "rope", {40: [0.5] * 5, 80: [0.5] * 5, 160: [0.5] * 5,
                                        320: [0.5] * 5})
  _write(root, "parity_check", "randomized", {40: [0.6] * 5, 80: [0.9] * 5, 160: [0.9] * 5,
                                              320: [0.9] * 5})
  text = R.report(root)
  ep = text.split("## even_pairs")[1].split("## parity_check")[0]
  assert "**Q2 (randomized > rope on the long lengths):** reproduced" in ep
  assert "+20.1 points" in ep  # mean of (0.2, 0.2033, 0.1967, 0.2, 0.2067) = 0.2013
  pc = text.split("## parity_check")[1].split("## cycle_navigation")[0]
  assert "not testable at this scale" in pc
  assert "cycle_navigation" in text and "| nope | not run yet" in text


def test_report_draws_and_links_one_length_figure_per_task_with_runs(tmp_path):
  root, figdir = str(tmp_path / "results"), str(tmp_path / "figs")
  acc = {n: [0.9, 0.8, 0.85, 0.9, 0.95] for n in (40, 80, 160, 320)}
  _write(root, "even_pairs", "rope", acc)
  path = os.path.join(root, "even_pairs", "rope", "lengths.json")
  with open(path) as f:
    res = json.load(f)
  res.update(pe="rope", faithful=False, task="even_pairs", train_len=40)
  for r in res["lengths"]:  # what experiments.lengths writes beside the per-seed accuracies
    r.update(factor=r["seq_len"] // 40, mean=0.88, ci95=[0.83, 0.92])
  with open(path, "w") as f:
    json.dump(res, f)
  text = R.report(root, figdir, "figs")
  assert os.listdir(figdir) == ["lengths_even_pairs.png"]
  assert "![even_pairs: accuracy against test length](figs/lengths_even_pairs.png)" in text
  assert "lengths_parity_check" not in text  # no run committed: no figure
  assert "![" not in R.report(root)  # without figdir: text only

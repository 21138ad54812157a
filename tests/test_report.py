import json
import os
import subprocess
import sys


def _fixture_run(root, task, name, pe, acc, faithful=False, ablation=None, rope_heads=1):
  wd = os.path.join(root, task, name)
  os.makedirs(wd)
  s = {"pe": pe, "task": task, "preset": "smoke", "faithful": faithful,
       "rope_heads": rope_heads, "seeds": list(range(len(acc))), "steps": 10,
       "test_accuracy": acc, "test_accuracy_mean": sum(acc) / len(acc),
       "test_accuracy_std": 0.0, "train_accuracy": acc, "wall_seconds": 1.0}
  with open(os.path.join(wd, "summary.json"), "w") as f:
    json.dump(s, f)
  if ablation:
    with open(os.path.join(wd, "ablation.json"), "w") as f:
      json.dump(ablation, f)


def test_report_renders_from_fixture_workdirs(tmp_path):
  runs = tmp_path / "runs"
  abl = {"baseline": [0.9, 0.8, 0.85], "max_drop_points_mean": [60.0, 5.0],
         "max_drop_points_ci95": [3.0, 1.0], "deposit_score_mean": [0.9, 0.1],
         "deposit_score_ci95": [0.05, 0.02]}
  _fixture_run(str(runs), "distance", "rope", "rope", [0.9, 0.8, 0.85], ablation=abl)
  _fixture_run(str(runs), "distance", "nope", "nope", [0.07, 0.06, 0.07])
  _fixture_run(str(runs), "distance", "rope_sinusoidal-faithful", "rope_sinusoidal",
               [0.5, 0.6, 0.55], faithful=True)
  _fixture_run(str(runs), "count", "mla", "mla", [0.95, 0.96, 0.97])
  _fixture_run(str(runs), "distance", "rope-long", "rope", [0.99, 0.98, 0.97])
  from experiments import configs
  train = dict(configs.train_settings("smoke", "rope", False), batch_size=64,
               epochs=8, steps=None)
  with open(os.path.join(runs, "distance", "rope-long", "config.json"), "w") as f:
    json.dump({"run": {"train": train}}, f)
  dec = {"contraction_ratio_median": [[[0.5, 1.0]], [[0.7, 1.0]]],  # seeds, L, H
         "spread_median": [[[2.0, 4.0]], [[2.0, 4.0]]],
         "bias_spread_median": [[[1.0, 1.0]], [[1.0, 1.0]]],
         "without_bias_spread_median": [[[3.0, 3.0]], [[3.0, 3.0]]],
         "deposit_head_ratio_mean": 0.6, "other_heads_ratio_mean": 1.0}
  with open(os.path.join(runs, "distance", "rope", "decompose.json"), "w") as f:
    json.dump(dec, f)
  _fixture_run(str(runs), "distance", "alibi-paper", "alibi", [0.7, 0.7, 0.7])
  with open(os.path.join(runs, "distance", "alibi-paper", "config.json"), "w") as f:
    json.dump({"run": {"model": {"alibi_slopes": "paper"}}}, f)
  alibi_dec = dict(dec, alibi_bias_spread_over_asymptotic_median=[[[0.9, 1.1]], [[1.0, 1.0]]])
  _fixture_run(str(runs), "distance", "alibi", "alibi", [0.2, 0.2, 0.2])
  with open(os.path.join(runs, "distance", "alibi", "decompose.json"), "w") as f:
    json.dump(alibi_dec, f)
  mla_dec = dict(dec, term_norm_mean={"mla_content": [[1.0, 3.0]], "mla_rotary": [[0.5, 0.25]]})
  with open(os.path.join(runs, "count", "mla", "decompose.json"), "w") as f:
    json.dump(mla_dec, f)
  out = tmp_path / "RESULTS.md"
  res = subprocess.run([sys.executable, "-m", "experiments.report", f"--runs={runs}",
                        f"--out={out}", f"--figdir={tmp_path / 'fig'}",
                        "--ceiling_examples=200"], capture_output=True, text=True)
  assert res.returncode == 0, res.stderr[-2000:]
  text = out.read_text()
  assert "## Task 1 — trigger distance" in text and "## Task 2 — trigger count" in text
  # mean ± t-interval of (90, 80, 85): 85.0 ± 4.303 * 5 / sqrt(3) = 12.4
  assert "| rope | clean | smoke | 3 | 85.0 ± 12.4 | 90.0 80.0 85.0 | — |" in text
  assert "| rope_sinusoidal | faithful | smoke | 3 | 55.0 ± 12.4" in text
  assert "| rope | clean | smoke (batch 64, 10 steps) | 3 | 98.0 ± 2.5 |" in text
  assert "92.64" in text and "97.41" in text  # paper numbers beside our rows
  assert "L0: 60.0 ± 3.00 / 0.90 ± 0.05" in text
  assert "Bayes ceiling" in text
  assert "| distance | rope | clean | 0 | 0.800 [0.600, 1.000] | 0.600 vs 1.000 | 3.00 | 1.00 | 3.00 |" in text
  assert "| count | clean | 0 | 2.00 | 0.38 |" in text  # MLA channel norms, mean over heads
  assert "| distance | clean | 0.950 1.050 |" in text  # ALiBi spread vs 0.55 m n²
  assert "| alibi (paper slopes) | clean | smoke | 3 | 70.0 ± 0.0 |" in text
  assert os.path.exists(tmp_path / "fig" / "accuracy_distance.png")
  # hand-written notes survive a re-render
  out.write_text(text + "\n<!-- hand-written notes below are kept by experiments.report -->\nNOTE\n")
  subprocess.run([sys.executable, "-m", "experiments.report", f"--runs={runs}",
                  f"--out={out}", f"--figdir={tmp_path / 'fig'}",
                  "--ceiling_examples=50"], check=True, capture_output=True)
  assert out.read_text().rstrip().endswith("NOTE")


def test_report_without_runs_fails(tmp_path):
  res = subprocess.run([sys.executable, "-m", "experiments.report",
                        f"--runs={tmp_path}", f"--out={tmp_path / 'R.md'}"],
                       capture_output=True, text=True)
  assert res.returncode == 2 and "no runs" in res.stderr

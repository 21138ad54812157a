"""(h), the content-dependent coupling grid: its rule on hand-made runs."""
import json
import os

import numpy as np

from studies.arxiv_2505_13027 import grid


def _run(root, pe, *, ratio, examples, plateaued=(True,) * 5, measure="contraction_ratio"):
  """A committed run: summary, a 3-evaluation metrics curve that first reaches
  90 % of its final accuracy at ``examples[s]``, and a last spectra row whose
  ``measure`` is ``ratio[s]`` on every layer and head."""
  d = os.path.join(root, pe)
  os.makedirs(d)
  seeds = list(range(5))
  summary = {"pe": pe, "seeds": seeds, "test_accuracy": [1.0] * 5, "preset": "cpu",
             "plateau": {"per_seed": list(plateaued)}}
  cfg = {"run": {"train": {"epochs": 24}}}
  for name, obj in (("summary.json", summary), ("config.json", cfg)):
    with open(os.path.join(d, name), "w") as f:
      json.dump(obj, f)
  grid_seen = sorted({1000, 2000, 3000} | set(examples))
  with open(os.path.join(d, "metrics.jsonl"), "w") as f:
    for seen in grid_seen:
      acc = [1.0 if seen >= examples[s] else 0.5 for s in range(5)]
      f.write(json.dumps({"step": seen, "examples_seen": seen, "test_accuracy": acc}) + "\n")
  other = "widening_ratio" if measure == "contraction_ratio" else "contraction_ratio"
  row = {"step": 1000, measure: [[[r] * 4] * 2 for r in ratio], other: [[[1.0] * 4] * 2] * 5}
  with open(os.path.join(d, "spectra.jsonl"), "w") as f:
    f.write(json.dumps(row) + "\n")


def test_claim_h_by_hand(tmp_path):
  g, c = str(tmp_path / "grid"), str(tmp_path / "count")
  # pope contracts less than rope on every seed: log ratios differ by log(0.9/0.8)
  _run(c, "rope", ratio=[0.8] * 5, examples=[1000] * 5)
  _run(g, "pope", ratio=[0.9] * 5, examples=[1000, 1000, 2000, 1000, 1000])
  # alibi_data did not converge: its pair is inconclusive whatever the numbers
  _run(c, "alibi", ratio=[1.5] * 5, examples=[1000] * 5, measure="widening_ratio")
  _run(g, "alibi_data", ratio=[3.0] * 5, examples=[3000] * 5, measure="widening_ratio",
       plateaued=(True, False, False, False, True))
  runs = grid.load_grid(g, c)
  assert set(runs) == {"rope", "pope", "alibi", "alibi_data"}
  np.testing.assert_allclose(grid.coupling_per_seed(runs["pope"], "contraction_ratio"), 0.9)
  rows = {(r["pair"], r["measure"]): r["statement"] for r in grid.claim_h(runs)}
  spec = rows[("pope vs rope", "spectrum")]
  assert spec.startswith("changes: pope contracts less")
  assert f"{np.log(0.9 / 0.8):+.3f}" in spec
  # one seed of five needed twice the examples: the CI of the mean contains 0
  assert rows[("pope vs rope", "examples")].startswith("no change detected")
  assert rows[("alibi_data vs alibi", "spectrum")] == \
      "inconclusive (not converged: alibi_data)"
  text = "\n".join(grid.grid_section(runs))
  assert "| rope_learned | not run yet" in text and "| pope | 100.0 | 5/5 | 0.900 |" in text


def test_grid_per_layer_table_and_figures(tmp_path):
  """The per-layer table reads each layer's median over heads, mean over
  seeds (here: layer 0 heads {0.5, 0.6, 0.7, 2.0} -> 0.65, layer 1 all 0.9,
  seed 1 shifted by +0.1); the figures are drawn from the same runs."""
  from pe_spectral.pe import encodings
  from pe_spectral.training import config as C
  g, c = str(tmp_path / "grid"), str(tmp_path / "count")
  _run(c, "rope", ratio=[0.8] * 5, examples=[1000] * 5)
  _run(g, "pope", ratio=[0.9] * 5, examples=[1000] * 5)
  rows = []
  for s in range(5):
    shift = 0.1 if s == 1 else 0.0
    rows.append([[0.5 + shift, 0.6 + shift, 0.7 + shift, 2.0], [0.9 + shift] * 4])
  path = os.path.join(g, "pope", "spectra.jsonl")
  with open(path, "w") as f:
    f.write(json.dumps({"step": 1000, "contraction_ratio": rows,
                        "widening_ratio": [[[1.0] * 4] * 2] * 5}) + "\n")
  # rope_learned with two recorded evaluations of its trained frequencies
  _run(g, "rope_learned", ratio=[0.95] * 5, examples=[1000] * 5)
  model = C.build("smoke", "count", "rope_learned").model
  with open(os.path.join(g, "rope_learned", "config.json"), "w") as f:
    json.dump({"run": {"model": model.to_dict(), "train": {"epochs": 24}}}, f)
  theta0 = encodings.get("rope_learned").frequencies(model)
  freq_rows = []
  shape = (5, model.num_layers, model.num_heads)
  for step, scale in ((1000, 1.0), (2000, 1.5)):
    theta = np.broadcast_to(theta0 * scale, shape + (len(theta0),))
    drift = np.full(shape, abs(np.log(scale)))
    drift[:, 0, 1] *= 4.0  # head 0.1 moved 4x as far as the others
    freq_rows.append({"step": step, "theta": theta.tolist(), "drift_median": drift.tolist()})
  with open(os.path.join(g, "rope_learned", "frequencies.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in freq_rows)
  # its head ablation: layer 0's largest drop is head 1 in seeds 0-3, head 0 in
  # seed 4 (the smoke model has 2 heads); layer 1's drops are larger and ignored
  drop = np.full(shape, 0.01)
  drop[:, 1, 0] = 0.9
  drop[:4, 0, 1] = drop[4, 0, 0] = 0.3
  with open(os.path.join(g, "rope_learned", "ablation.json"), "w") as f:
    json.dump({"drop": drop.tolist(), "argmax_head": [[1, 0]] * 5, "seeds": list(range(5))}, f)
  runs = grid.load_grid(g, c)
  # oracle: per seed, the median of 4 heads is the mean of the middle two
  layer0 = np.mean([(0.6 + 0.7) / 2 + (0.1 if s == 1 else 0.0) for s in range(5)])
  layer1 = np.mean([0.9 + (0.1 if s == 1 else 0.0) for s in range(5)])
  np.testing.assert_allclose(grid.coupling_per_layer(runs["pope"], "contraction_ratio"),
                             [layer0, layer1], rtol=1e-12)
  text = "\n".join(grid.grid_section(runs))
  assert f"| pope | {layer0:.3f} | {layer1:.3f} | 1.000 | 1.000 |" in text
  assert "rope_learned at the last evaluation: each head's median |log θ/θ₀|" in text
  # layer 0: heads at log 1.5 and 4 log 1.5 on every seed -> median 2.5 log 1.5
  assert f"layer 0 {2.5 * np.log(1.5):.3f}, layer 1 {np.log(1.5):.3f};" in text
  assert "reached or crossed 0: layer 0 0 %, layer 1 0 %" in text
  # deposit head's drift over the other layer-0 heads' median: 4 in seeds 0-3, 1/4 in seed 4
  assert "seed 0: head 1 (drop 30.0 points)" in text and "seed 4: head 0 (drop 30.0 points)" in text
  assert "Ratio, median over seeds: 4.00." in text
  figdir = str(tmp_path / "fig")
  lines = grid.grid_figures(runs, figdir, "figs")
  drawn = sorted(os.listdir(figdir))
  assert drawn == ["grid_coupling.png", "grid_curves.png", "grid_rope_learned_frequencies.png"]
  assert sum(line.startswith("![") for line in lines) == 3
  assert "(figs/grid_curves.png)" in "\n".join(lines)


def test_task1_table_is_described_with_budgets_and_no_statement(tmp_path):
  """Task 1 (TASK1): the same measures, each run's epochs and seeds in its row
  (the members train at their static partner's budget), no statement table
  even where the paired rule would decide, and figures under their own names."""
  g, t = str(tmp_path / "grid-distance"), str(tmp_path / "thesis")
  _run(t, "rope", ratio=[0.8] * 5, examples=[1000] * 5)
  _run(g, "pope", ratio=[0.6] * 5, examples=[2000] * 5)
  with open(os.path.join(t, "rope", "config.json"), "w") as f:
    json.dump({"run": {"train": {"epochs": 16}}}, f)
  runs = grid.load_grid(g, t)
  text = "\n".join(grid.grid_section(runs, grid.TASK1))
  assert text.startswith(grid.TASK1["title"]) and "Descriptive only" in text
  assert "| rope (16 ep × 5 seeds) | 100.0 | 5/5 | 0.800 | 1.000 | 1,000 |" in text
  assert "| pope (24 ep × 5 seeds) | 100.0 | 5/5 | 0.600 | 1.000 | 2,000 |" in text
  assert "| alibi_data | not run yet" in text
  # Task 2's rule would say "changes" for this pair; Task 1 states nothing
  assert "changes:" in "\n".join(grid.grid_section(runs))
  assert "| pair | measure | statement |" not in text and "changes:" not in text
  figdir = str(tmp_path / "fig")
  lines = grid.grid_figures(runs, figdir, "figs", grid.TASK1)
  assert sorted(os.listdir(figdir)) == ["grid_distance_coupling.png", "grid_distance_curves.png"]
  assert "(figs/grid_distance_curves.png)" in "\n".join(lines)

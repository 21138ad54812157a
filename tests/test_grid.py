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
  row = {"step": 9, measure: [[[r] * 4] * 2 for r in ratio], other: [[[1.0] * 4] * 2] * 5}
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

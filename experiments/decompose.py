r"""Spectral diagnostics of a trained sweep: decompose real attention logits.

  python -m experiments.decompose --workdir=runs/distance/rope [--examples=64]

For a fixed batch of test inputs, per seed, layer and head: the logits, their
content/position terms (additive) or Hadamard form (rotary), and spectral
measures; the contraction ratio spread(S(L)) / spread(S(L_θ=0)) compares each
head's logits with the same layer's logits with the rotation removed (MLA:
its decoupled rotary channel left unrotated).
Writes ``decompose.json`` and ``contraction.png`` (layers × heads median
ratio; distribution over examples; the deposit head from ``ablation.json``,
when present, marked).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
from absl import app, flags, logging

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "A sweep workdir (config.json + ckpt/), or a "
                    "comma list of them (analysed one after another in one process).")
flags.DEFINE_integer("examples", 64, "Test examples to decompose.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  wds, err = cli.checked_workdirs(FLAGS.workdir)
  if err is not None:
    print(f"error: {err}", file=sys.stderr)
    return 2
  if FLAGS.examples < 1:
    print("error: --examples must be >= 1", file=sys.stderr)
    return 2
  return max(analyse(wd) for wd in wds)


def analyse(wd: str) -> int:
  """Analyses one workdir; 0, or 2 after a one-line error."""
  from pe_spectral.analysis import decompose, plotting
  from pe_spectral.runtime import devices
  from pe_spectral.training import runner
  try:
    config, rc, steps, states, data, step, _ = runner.load_run(wd)
  except (runner.CheckpointError, runner.BadFileError) as e:
    print(f"error: {cli.error_line(e)}", file=sys.stderr)
    return 2
  ids = data.test_ids[:FLAGS.examples]
  if rc.task.is_lm:  # a language model's windows: the tokens it reads
    ids = ids[:, :-1]
  if ids.shape[0] < FLAGS.examples:
    print(f"note: --examples={FLAGS.examples}, but {wd}'s test split has "
          f"{ids.shape[0]} examples: decomposing all {ids.shape[0]}", file=sys.stderr,
          flush=True)
  summ = decompose.summarize(steps.graphdef, states["params"], ids, rc.model.num_layers)
  ratio = np.stack([devices.fetch(s["contraction_ratio"]) for s in summ], 2)  # [S, B, L, H]
  widening = np.stack([devices.fetch(s["widening_ratio"]) for s in summ], 2)
  stable = np.stack([devices.fetch(s["measures"]["stable_rank"]) for s in summ], 2)
  spread = np.stack([devices.fetch(s["measures"]["spread"]) for s in summ], 2)
  defect = np.stack([devices.fetch(s["measures"]["toeplitz_defect"]) for s in summ], 2)
  bias_spread = np.stack([devices.fetch(s["bias_spread"]) for s in summ], 2)
  nobias_spread = np.stack([devices.fetch(s["without_bias_spread"]) for s in summ], 2)
  terms = {k: np.stack([devices.fetch(s["term_norms"][k]) for s in summ], 2).mean((0, 1))
           for k in summ[0]["term_norms"]}  # MLA adds its content/rotary channels
  alibi_ratio = None
  enc = rc.model.encoding
  if enc.bias_extremes(rc.model, 2) is not None:
    # The measured spread of the bias's symmetric part against the PE's exact
    # extremes (ALiBi: spectral.alibi_extreme_eigs, ≈ 0.55 m n^2) on each
    # example's real (unpadded) length n: 1 up to float rounding unless the
    # bias is not what the closed form describes.
    from pe_spectral.nn.model import PAD_ID
    n = np.asarray(ids != PAD_ID).sum(1)                                 # [B]
    exact = {}
    for length in np.unique(n):
      lo, hi = enc.bias_extremes(rc.model, int(max(length, 2)))
      exact[length] = np.asarray(hi, np.float64) - np.asarray(lo, np.float64)
    ref = np.stack([exact[length] for length in n])                      # [B, H]
    alibi_ratio = np.median(bias_spread / ref[None, :, None, :], axis=1)  # [S, L, H]
  deposit = None
  abl_path = os.path.join(wd, "ablation.json")
  if os.path.exists(abl_path):
    with open(abl_path) as f:
      abl = json.load(f)
    deposit = np.asarray(abl["argmax_head"])  # [seeds, layers]
  out = {
      "workdir": os.path.abspath(wd), "step": step, "pe": rc.model.pe,
      "task": rc.task.name, "faithful": rc.model.faithful, "seeds": config["seeds"],
      "examples": int(ids.shape[0]),
      "contraction_ratio_median": np.median(ratio, axis=1).tolist(),  # [S, L, H]
      # spread(S(L)) / spread(S(L - B)) per example: what an additive bias does
      "widening_ratio_median": np.median(widening, axis=1).tolist(),  # [S, L, H]
      "stable_rank_median": np.median(stable, axis=1).tolist(),
      "spread_median": np.median(spread, axis=1).tolist(),
      "toeplitz_defect_median": np.median(defect, axis=1).tolist(),
      "bias_spread_median": np.median(bias_spread, axis=1).tolist(),
      "without_bias_spread_median": np.median(nobias_spread, axis=1).tolist(),
      "term_norm_mean": {k: v.tolist() for k, v in terms.items()},  # [L, H]
      # None where the θ = 0 logits are not q·k + B (PoPE): no identity to check
      "additive_residual_max": (None if not rc.model.encoding.bilinear_logits else
                                float(max(np.max(devices.fetch(s["additive_residual"]))
                                          for s in summ))),
      "hadamard_residual_max": (float(max(np.max(devices.fetch(s["hadamard_residual"]))
                                          for s in summ))
                                if "hadamard_residual" in summ[0] else None),
  }
  if alibi_ratio is not None:
    out["alibi_bias_spread_over_exact_median"] = alibi_ratio.tolist()
  if deposit is not None:
    med = np.median(ratio, axis=1)  # [S, L, H]
    dep_r, other_r = [], []
    for s in range(med.shape[0]):
      for l in range(med.shape[1]):
        h = deposit[s, l]
        dep_r.append(med[s, l, h])
        other_r.extend(np.delete(med[s, l], h))
    out["deposit_head_ratio_mean"] = float(np.mean(dep_r))
    out["other_heads_ratio_mean"] = float(np.mean(other_r))
  runner.write_json(os.path.join(wd, "decompose.json"), out)
  plotting.contraction_figure(ratio, os.path.join(wd, "contraction.png"),
                              f"{rc.task.name} / {rc.model.pe}", deposit)
  print(f"{rc.model.pe}: median contraction ratio per layer × head (mean over seeds):")
  print(np.round(np.median(ratio, axis=1).mean(0), 3))
  if alibi_ratio is not None:
    print("ALiBi: spread(S(B)) / exact ALiBi spread per head, median over examples:",
          np.round(alibi_ratio.mean((0, 1)), 3))
  if deposit is not None:
    print(f"deposit heads: {out['deposit_head_ratio_mean']:.3f}  other heads: "
          f"{out['other_heads_ratio_mean']:.3f}")
  return 0


if __name__ == "__main__":
  cli.run(main)

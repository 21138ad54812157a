r"""The language study's report (study.md): its registered rules on the committed
runs, RESULTS.md and the bits-per-byte-against-length figure.

  python -m studies.lm_stdlib.report       # RESULTS.md + figures from results/runs

Every number is read from the runs' committed files (``summary.json``,
``lengths.json``, ``decompose.json``, ``ablation.json``); a PE whose run is not
committed yet is listed as missing, and a rule that needs it says so.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from pe_spectral.analysis import plotting, stats
from studies.arxiv_2505_13027.claims import deposit_rule

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "results", "runs")
PES = ("nope", "sinusoidal", "learned", "alibi", "rope", "fire", "kerple_log", "pope",
       "alibi_data", "carope")
MULTIPLICATIVE, ADDITIVE = ("rope",), ("alibi", "fire", "kerple_log")
DESCRIPTIVE = ("pope", "carope", "alibi_data")
# Added after the pre-registration (study.md's addendum): reported descriptively,
# under no decision rule.
EXPLORATORY = ("path", "stickbreaking")
FLAT_MARGIN = 0.05      # bits per byte (i)
FACTORS = (2.0, 4.0, 8.0, 16.0)
SCALING_FACTORS = (4.0, 16.0)
TRAINED_BY = 1.0        # bits per byte below the unigram baseline (the training check)
DEPOSIT_SEED_FRAC = 2.0 / 3.0


def load(root: str = RUNS) -> dict:
  """``{pe: {file stem: parsed JSON}}`` of every committed run."""
  out = {}
  for pe in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    d = os.path.join(root, pe)
    files = {}
    for name in ("summary", "lengths", "decompose", "ablation", "config"):
      path = os.path.join(d, name + ".json")
      if os.path.exists(path):
        with open(path) as f:
          files[name] = json.load(f)
    if "summary" in files:
      out[pe] = files
  return out


# -- the rules (pure functions of run records) ---------------------------------

def trained(run: dict) -> bool:
  """The training check: mean validation bits per byte at least ``TRAINED_BY``
  below the corpus's unigram baseline on the validation split."""
  s = run["summary"]
  return s["test_bits_per_byte_mean"] <= s["unigram_bits_per_byte"] - TRAINED_BY


def _rows(run: dict, scaling: str = "none") -> dict:
  return {r["factor"]: r for r in run["lengths"]["bits_per_byte"].get(scaling, [])}


def length_ratio(run: dict, factor: float, scaling: str = "none"):
  """``[seeds]`` bpb(factor x) - bpb(1 x) per seed (both without scaling at
  1x), or None where the run has no number at that length."""
  rows, base = _rows(run, scaling), _rows(run)
  if factor not in rows or rows[factor]["bits_per_byte"] is None:
    return None
  return (np.asarray(rows[factor]["bits_per_byte"], float)
          - np.asarray(base[1.0]["bits_per_byte"], float))


def flat_verdict(run: dict, factor: float) -> dict:
  """(i): flat / not flat / undecided / not evaluable at ``factor`` x."""
  d = length_ratio(run, factor)
  if d is None:
    return {"verdict": "not evaluable", "mean": None, "ci95": None}
  mean, lo, hi = stats.bootstrap_mean_ci(d)
  verdict = ("flat" if hi < FLAT_MARGIN else "not flat" if lo > FLAT_MARGIN else "undecided")
  return {"verdict": verdict, "mean": mean, "ci95": [lo, hi]}


def scaling_verdict(run: dict, scaling: str, factor: float) -> dict:
  """(i-b): bpb(rope + scaling) - bpb(rope) at ``factor`` x, paired over seeds."""
  a, b = _rows(run, scaling).get(factor), _rows(run).get(factor)
  if not a or not b or a["bits_per_byte"] is None or b["bits_per_byte"] is None:
    return {"verdict": "missing", "mean": None, "ci95": None}
  d = np.asarray(a["bits_per_byte"], float) - np.asarray(b["bits_per_byte"], float)
  mean, lo, hi = stats.bootstrap_mean_ci(d)
  verdict = "helps" if hi < 0 else "hurts" if lo > 0 else "no change detected"
  return {"verdict": verdict, "mean": mean, "ci95": [lo, hi]}


def coupling_ci(run: dict, coupling: str) -> list:
  """(ii): per layer, the 95 % CI over seeds of the mean log coupling ratio
  (median over heads per seed): contraction for multiplicative, widening for
  additive PEs."""
  key = "contraction_ratio_median" if coupling == "multiplicative" else "widening_ratio_median"
  r = np.median(np.asarray(run["decompose"][key], float), axis=-1)  # [seeds, layers]
  out = []
  for layer in range(r.shape[1]):
    mean, lo, hi = stats.bootstrap_mean_ci(np.log(r[:, layer]))
    out.append({"layer": layer, "mean_log": mean, "ci95": [lo, hi],
                "ratio": float(np.exp(mean))})
  return out


def claim_e(runs: dict) -> dict:
  """(ii) as registered: reproduced if every multiplicative layer's CI lies
  below 0 and every additive one's above; refuted if any lies on the wrong
  side; inconclusive otherwise (or if a PE is missing or untrained)."""
  missing = [pe for pe in MULTIPLICATIVE + ADDITIVE
             if pe not in runs or "decompose" not in runs[pe] or not trained(runs[pe])]
  rows, wrong, right = {}, 0, 0
  for pe, sign in [(p, -1) for p in MULTIPLICATIVE] + [(p, 1) for p in ADDITIVE]:
    if pe in missing:
      continue
    rows[pe] = coupling_ci(runs[pe], "multiplicative" if sign < 0 else "additive")
    for c in rows[pe]:
      lo, hi = c["ci95"]
      if (sign < 0 and lo > 0) or (sign > 0 and hi < 0):
        wrong += 1
      elif (sign < 0 and hi < 0) or (sign > 0 and lo > 0):
        right += 1
  total = 2 * len(MULTIPLICATIVE + ADDITIVE)
  if wrong:
    verdict = "refuted"
  elif right == total and not missing:
    verdict = "reproduced"
  else:
    verdict = "inconclusive"
  return {"verdict": verdict, "rows": rows, "missing": missing, "right": right,
          "wrong": wrong, "total": total}


def claim_c(run: dict) -> dict:
  """(iii): the deposit rule per seed on the single-head ablation; present
  when at least 2/3 of the seeds have one."""
  r = deposit_rule(run["ablation"])
  return {**r, "present": r["fraction"] >= DEPOSIT_SEED_FRAC}


# -- rendering -------------------------------------------------------------------

def _ci(x) -> str:
  return "—" if x is None else f"[{x[0]:+.3f}, {x[1]:+.3f}]"


def render(runs: dict) -> str:
  missing = [pe for pe in PES if pe not in runs]
  lines = [
      "# Positional encodings on real text: results",
      "",
      f"Generated by `python -m studies.lm_stdlib.report` on {time.strftime('%Y-%m-%d')} from "
      f"{sum(pe in runs for pe in PES)} committed registered run(s) under `results/runs` "
      "(the pre-registration: "
      "[study.md](study.md)). Bits per byte on the test split of the Python standard library "
      "corpus, 5 paired seeds per PE, the library's `cpu` preset of `--task=lm`.",
      ""]
  if missing:
    lines += [f"**Not run yet:** {', '.join(missing)}. Every rule below that needs one of "
              "them says so.", ""]
  lines += ["## Training check", "",
            "| PE | validation bits/byte (mean ± std) | unigram | trained |",
            "|---|---|---|---|"]
  for pe in PES:
    if pe in runs:
      s = runs[pe]["summary"]
      lines.append(f"| {pe} | {s['test_bits_per_byte_mean']:.3f} ± "
                   f"{s['test_bits_per_byte_std']:.3f} | {s['unigram_bits_per_byte']:.3f} | "
                   f"{'yes' if trained(runs[pe]) else 'no'} |")
  lines += ["", "## (i) Bits per byte against length", "",
            "Test split, disjoint windows; mean over seeds (95 % bootstrap CI in lengths.json). "
            f"Verdict per length: *flat* if the CI of the per-seed length ratio lies below "
            f"+{FLAT_MARGIN} bits per byte.", "",
            "| PE | 1x | 2x | 4x | 8x | 16x | " + " | ".join(f"flat to {f:g}x?" for f in FACTORS)
            + " |",
            "|---" * (6 + len(FACTORS)) + "|"]
  for pe in PES:
    if pe not in runs or "lengths" not in runs[pe]:
      continue
    rows = _rows(runs[pe])
    cells = [("n/a" if rows.get(f, {}).get("mean") is None else f"{rows[f]['mean']:.3f}")
             for f in (1.0, 2.0, 4.0, 8.0, 16.0)]
    verdicts = [flat_verdict(runs[pe], f)["verdict"] for f in FACTORS]
    lines.append(f"| {pe} | " + " | ".join(cells) + " | " + " | ".join(verdicts) + " |")
  lines += ["", "![bits per byte against length](lengths_all.png)", "",
            "### (i-b) Evaluation-time scaling of RoPE", "",
            "| scaling | " + " | ".join(f"{f:g}x: bpb(scaled) − bpb(rope), CI, verdict"
                                        for f in SCALING_FACTORS) + " |",
            "|---" * (1 + len(SCALING_FACTORS)) + "|"]
  if "rope" in runs and "lengths" in runs["rope"]:
    for scaling in ("pi", "yarn"):
      cells = []
      for f in SCALING_FACTORS:
        v = scaling_verdict(runs["rope"], scaling, f)
        cells.append("missing" if v["mean"] is None else
                     f"{v['mean']:+.3f} {_ci(v['ci95'])} {v['verdict']}")
      lines.append(f"| {scaling} | " + " | ".join(cells) + " |")
  else:
    lines.append("| — | rope not run yet |")
  e = claim_e(runs)
  lines += ["", "## (ii) The paper's (e) on language", "",
            f"**{e['verdict']}** ({e['right']} of {e['total']} PE-layers on the predicted side, "
            f"{e['wrong']} on the wrong side" +
            (f"; missing or untrained: {', '.join(e['missing'])}" if e["missing"] else "") + ").",
            "", "| PE | coupling | layer | ratio (geometric mean over seeds) "
            "| 95 % CI of the mean log |",
            "|---|---|---|---|---|"]
  for pe, rows in e["rows"].items():
    kind = "contraction" if pe in MULTIPLICATIVE else "widening"
    for c in rows:
      lines.append(f"| {pe} | {kind} | {c['layer']} | {c['ratio']:.3f} | {_ci(c['ci95'])} |")
  for pe in DESCRIPTIVE:
    if pe in runs and "decompose" in runs[pe]:
      kind = "additive" if pe == "alibi_data" else "multiplicative"
      for c in coupling_ci(runs[pe], kind):
        lines.append(f"| {pe} (descriptive) | {'widening' if kind == 'additive' else 'contraction'}"
                     f" | {c['layer']} | {c['ratio']:.3f} | {_ci(c['ci95'])} |")
  lines += ["", "## (iii) A deposit head", "",
            "| PE | seeds with a deposit | present (≥ 2/3) |", "|---|---|---|"]
  for pe in PES:
    if pe in runs and "ablation" in runs[pe]:
      c = claim_c(runs[pe])
      lines.append(f"| {pe}{' (the thesis expects it)' if pe == 'rope' else ''} | "
                   f"{sum(c['per_seed'])}/{len(c['per_seed'])} | "
                   f"{'yes' if c['present'] else 'no'} |")
  return "\n".join(lines + _exploratory(runs)) + "\n"


def _exploratory(runs: dict) -> list:
  """The PEs run after the pre-registration (study.md's addendum), described
  with the same measures and no verdict."""
  have = [pe for pe in EXPLORATORY if pe in runs]
  if not have:
    return []
  lines = ["", "## Exploratory: PEs added after the pre-registration", "",
           "Not pre-registered (study.md's addendum): the same launcher, preset and seeds; "
           "described here, under no decision rule.", "",
           "| PE | validation bits/byte (mean ± std) | trained | 1x | 2x | 4x | 8x | 16x "
           "| spread(S(L)) / spread(S(L − B)) per layer (geometric mean over seeds, 95 % CI "
           "of the mean log) | seeds with a deposit |", "|---" * 10 + "|"]
  for pe in have:
    run, s = runs[pe], runs[pe]["summary"]
    cells = ["—"] * 5
    if "lengths" in run:
      rows = _rows(run)
      cells = [("n/a" if rows.get(f, {}).get("mean") is None else f"{rows[f]['mean']:.3f}")
               for f in (1.0, 2.0, 4.0, 8.0, 16.0)]
    coupling = "—"
    if "decompose" in run:
      coupling = "; ".join(f"layer {c['layer']}: {c['ratio']:.3f} {_ci(c['ci95'])}"
                           for c in coupling_ci(run, "additive"))
    deposit = "—"
    if "ablation" in run:
      c = claim_c(run)
      deposit = f"{sum(c['per_seed'])}/{len(c['per_seed'])}"
    lines.append(f"| {pe} | {s['test_bits_per_byte_mean']:.3f} ± "
                 f"{s['test_bits_per_byte_std']:.3f} | {'yes' if trained(run) else 'no'} | "
                 + " | ".join(cells) + f" | {coupling} | {deposit} |")
  lines += ["", "The ratio is the spread of the logits' symmetric spectrum with the PE's "
            "term `B` over that without it (`decompose`'s widening ratio, median over heads "
            "per seed): for `path`, `B` is its Householder term `q_iᵀ(H_i⋯H_{j+1} − I)k_j/√d`, "
            "so below 1 means its transforms contract the content logits' spectrum (its "
            "contraction ratio against a θ = 0 counterpart is 1 by construction: that "
            "counterpart keeps `B`, as CoPE's does). `stickbreaking` has no position term "
            "(`B = 0`, the ratio 1 by construction): its order lives in the weights, not the "
            "logits (docs/spectral.md)."]
  return lines


def main() -> int:
  runs = load()
  with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
    f.write(render(runs))
  have = [runs[pe]["lengths"] for pe in PES if pe in runs and "lengths" in runs[pe]]
  for res in have:  # the figure draws each run without its scalings
    res["bits_per_byte"] = {"none": res["bits_per_byte"]["none"]}
  if have:
    plotting.bits_per_byte_curves(have, os.path.join(HERE, "lengths_all.png"),
                                  "Python stdlib, trained at 128 bytes (mean, 95% CI over seeds)")
  print(f"wrote {os.path.join(HERE, 'RESULTS.md')} from {len(runs)} run(s)", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())

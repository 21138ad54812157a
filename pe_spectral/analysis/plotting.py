"""Matplotlib figures (Agg backend; files only, never a window)."""
from __future__ import annotations

from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["accuracy_curves", "learning_curves", "ratio_curves", "ablation_per_seed",
           "seed_band", "save_figure", "attention_maps", "length_curves"]


def seed_band(ax, x, per_seed, label, color):
  """Mean ± std over seeds of ``[evals, seeds]`` accuracies, in percent."""
  a = np.asarray(per_seed, float) * 100.0  # [evals, seeds]
  mean, std = a.mean(1), a.std(1)
  ax.plot(x, mean, color=color, label=label)
  ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)


def save_figure(fig, path: str, **savefig_kw) -> None:
  """Lays the figure out, writes it to ``path`` and frees it."""
  fig.tight_layout()
  fig.savefig(path, **savefig_kw)
  plt.close(fig)


def accuracy_curves(records: list[dict], path: str, title: str = "") -> None:
  """Train/test accuracy (mean ± std over seeds) against step, from metrics.jsonl rows."""
  if not records:
    return
  steps = [r["step"] for r in records]
  fig, ax = plt.subplots(figsize=(5.5, 3.5), dpi=110)
  seed_band(ax, steps, [r["train_accuracy"] for r in records], "train", "tab:blue")
  seed_band(ax, steps, [r["test_accuracy"] for r in records], "test", "tab:orange")
  ax.set_xlabel("step")
  ax.set_ylabel("accuracy (%)")
  ax.set_ylim(0, 100)
  ax.grid(alpha=0.3)
  n = len(records[-1]["test_accuracy"])
  ax.set_title(f"{title} (mean ± std over {n} seed{'s' if n != 1 else ''})",
               fontsize=9)
  ax.legend(loc="lower right", fontsize=8)
  save_figure(fig, path)


def spectral_bound_tightness(rows: list[dict], path: str) -> None:
  """Slack of circulant vs Gershgorin enclosures (÷ exact range) per PE, vs n."""
  pes = list(dict.fromkeys(r["pe"] for r in rows))
  cols = min(4, len(pes))
  nrows = -(-len(pes) // cols)
  fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 3.0 * nrows), dpi=110,
                           squeeze=False)
  for ax in axes.flat[len(pes):]:
    ax.axis("off")
  for ax, pe in zip(axes.flat, pes):
    sel = [r for r in rows if r["pe"] == pe]
    n = [r["n"] for r in sel]
    span = [max(r["lam_max"] - r["lam_min"], 1e-30) for r in sel]
    for key, color in (("circulant", "tab:blue"), ("gershgorin", "tab:gray")):
      top = [(r[f"{key}_hi"] - r["lam_max"]) / s for r, s in zip(sel, span)]
      bot = [(r["lam_min"] - r[f"{key}_lo"]) / s for r, s in zip(sel, span)]
      ax.plot(n, top, "o-", color=color, label=f"{key}: above λmax")
      ax.plot(n, bot, "s--", color=color, label=f"{key}: below λmin")
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_title(pe, fontsize=9)
    ax.set_xlabel("n")
    ax.grid(alpha=0.3)
  for row in axes:
    row[0].set_ylabel("slack ÷ (λmax − λmin)")
  axes.flat[len(pes) - 1].legend(fontsize=6, loc="best")
  fig.suptitle("Certified eigenvalue enclosures (≥ 0 = valid)", fontsize=10)
  save_figure(fig, path)


def spectral_spread_growth(toeplitz_rows: list[dict], envelope_rows: list[dict],
                           path: str) -> None:
  """ALiBi spread/(m n²) and RoPE vs NoPE logit spectra with the θ-free envelope."""
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
  # a closed-form row (ALiBi) with its slope m = -t_1 (older files store "slope")
  al = [r for r in toeplitz_rows if r.get("exact_method") == "closed form"]
  if al:
    n = np.array([r["n"] for r in al], float)
    ratio = [(r["lam_max"] - r["lam_min"]) / (r.get("slope", abs(r.get("t1", 0.0)))
                                              * r["n"] ** 2) for r in al]
    a1.plot(n, ratio, "o-", label="exact spread / (m n²)")
    a1.axhline(0.5500506, color="k", ls=":", label="0.5500506 (Thm 10)")
    a1.set_xscale("log", base=2)
    a1.set_xlabel("n")
    a1.set_title("Symmetric ALiBi widens the spectrum ∝ n²", fontsize=9)
    a1.ticklabel_format(axis="y", useOffset=False)
    a1.legend(fontsize=7)
    a1.grid(alpha=0.3)
  if envelope_rows:
    ns = sorted({r["n"] for r in envelope_rows})
    def med(key):
      return [np.median([r[key] for r in envelope_rows if r["n"] == n]) for n in ns]
    p_minus_n = [p - q for p, q in zip(med("envelope_P"), med("envelope_N"))]
    rope = [p - q for p, q in zip(med("rope_lam_max"), med("rope_lam_min"))]
    nope = [p - q for p, q in zip(med("nope_lam_max"), med("nope_lam_min"))]
    a2.plot(ns, p_minus_n, "k:", label="envelope P − N (same for RoPE and NoPE)")
    a2.plot(ns, rope, "o-", label="RoPE spread of S(L)")
    a2.plot(ns, nope, "s--", label="NoPE spread of S(L)")
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("n")
    a2.set_title("RoPE logits, iid content: envelope is θ-free", fontsize=9)
    a2.legend(fontsize=7)
    a2.grid(alpha=0.3)
  save_figure(fig, path)


def spectral_content_contraction(rows: list[dict], path: str) -> None:
  """λ_max(RoPE Gram)/λ_max(NoPE Gram) per content model vs n (Prop. 8)."""
  if not rows:
    return
  fig, ax = plt.subplots(figsize=(5.5, 3.5), dpi=110)
  for kind in dict.fromkeys(r["content"] for r in rows):
    sel = [r for r in rows if r["content"] == kind]
    ax.plot([r["n"] for r in sel], [r["median"] for r in sel], "o-", label=kind)
  ax.axhline(1.0, color="k", lw=0.8)
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("n")
  ax.set_ylabel("λmax(RoPE) / λmax(NoPE)")
  ax.set_title("Does RoPE contract? It depends on the content", fontsize=9)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  save_figure(fig, path)


def ablation_heatmap(mean_drop, path: str, title: str = "") -> None:
  """Layers × heads heatmap of the mean accuracy drop; largest drop per layer annotated."""
  d = np.asarray(mean_drop, float)
  layers, heads = d.shape
  fig, ax = plt.subplots(figsize=(max(4.5, 1.0 + 0.45 * heads), 1.6 + 0.45 * layers),
                         dpi=110)
  vmax = max(float(np.abs(d).max()), 1e-9)
  im = ax.imshow(d, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
  for l in range(layers):
    h = int(np.argmax(d[l]))
    ax.text(h, l, f"{d[l, h]:.0f}", ha="center", va="center", fontsize=7,
            color="white" if abs(d[l, h]) > 0.5 * vmax else "black",
            fontweight="bold")
  ax.set_xticks(range(heads))
  ax.set_yticks(range(layers))
  ax.set_xlabel("head")
  ax.set_ylabel("layer")
  ax.set_title(title, fontsize=7)
  fig.colorbar(im, ax=ax, label="accuracy drop (points)", shrink=0.8)
  save_figure(fig, path)


def attention_maps(maps, path: str, title: str = "", length: Optional[int] = None) -> None:
  """One example's attention maps, a panel per (layer, head): ``maps`` is
  ``[layers, heads, n, n]`` (rows: queries, columns: keys; e.g.
  ``decompose.attention_maps`` of one seed and example, stacked over layers);
  ``length`` crops to the example's tokens (its padding left out)."""
  m = np.asarray(maps, float)
  layers, heads = m.shape[:2]
  n = m.shape[-1] if length is None else int(length)
  fig, axes = plt.subplots(layers, heads, figsize=(1.6 * heads + 0.8, 1.6 * layers + 0.6),
                           dpi=110, squeeze=False)
  for l in range(layers):
    for h in range(heads):
      ax = axes[l, h]
      ax.imshow(m[l, h, :n, :n], cmap="viridis", vmin=0.0, vmax=float(m[l, h, :n, :n].max()))
      ax.set_xticks([])
      ax.set_yticks([])
      if l == 0:
        ax.set_title(f"head {h}", fontsize=7)
      if h == 0:
        ax.set_ylabel(f"layer {l}\nquery", fontsize=7)
      if l == layers - 1:
        ax.set_xlabel("key", fontsize=7)
  fig.suptitle(title, fontsize=8)
  save_figure(fig, path)


def contraction_figure(ratio, path: str, title: str = "", deposit=None) -> None:
  """Left: layers × heads median contraction ratio (mean over seeds), deposit heads
  boxed; right: distribution over examples (all seeds) per layer/head."""
  r = np.asarray(ratio, float)  # [seeds, examples, layers, heads]
  _, _, layers, heads = r.shape
  med = np.median(r, axis=1).mean(0)
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 1.8 + 0.5 * layers), dpi=110)
  lim = max(abs(np.log2(med)).max(), 0.1)
  im = a1.imshow(np.log2(med), cmap="PuOr_r", vmin=-lim, vmax=lim, aspect="auto")
  for l in range(layers):
    for h in range(heads):
      a1.text(h, l, f"{med[l, h]:.2f}", ha="center", va="center", fontsize=6)
  if deposit is not None:
    dep = np.asarray(deposit)
    for l in range(layers):
      h = int(np.bincount(dep[:, l], minlength=heads).argmax())  # most frequent
      a1.add_patch(plt.Rectangle((h - 0.5, l - 0.5), 1, 1, fill=False, ec="k", lw=2))
  a1.set_xticks(range(heads))
  a1.set_yticks(range(layers))
  a1.set_xlabel("head")
  a1.set_ylabel("layer")
  a1.set_title("spread(S(L)) / spread(S(L_θ=0)), median (box: deposit head)", fontsize=7)
  fig.colorbar(im, ax=a1, label="log2 ratio", shrink=0.8)
  data = [r[:, :, l, h].ravel() for l in range(layers) for h in range(heads)]
  a2.boxplot(data, showfliers=False)
  a2.axhline(1.0, color="k", lw=0.8)
  a2.set_yscale("log")
  a2.set_xticks(range(1, layers * heads + 1))
  a2.set_xticklabels([f"{l}.{h}" for l in range(layers) for h in range(heads)],
                     fontsize=6, rotation=90)
  a2.set_xlabel("layer.head")
  a2.set_title("distribution over examples and seeds", fontsize=7)
  fig.suptitle(title, fontsize=9)
  save_figure(fig, path)


def spectra_over_training(rows: list[dict], path: str, title: str = "") -> None:
  """Contraction ratio and stable rank (mean over seeds) of every layer.head vs step."""
  if not rows:
    return
  steps = [r["step"] for r in rows]
  ratio = np.asarray([r["contraction_ratio"] for r in rows]).mean(1)  # [T, L, H]
  srank = np.asarray([r["stable_rank"] for r in rows]).mean(1)
  _, layers, heads = ratio.shape
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4), dpi=110)
  for l, h, style in _head_styles(layers, heads):
    a1.plot(steps, ratio[:, l, h], label=f"{l}.{h}", **style)
    a2.plot(steps, srank[:, l, h], **style)
  a1.axhline(1.0, color="k", lw=0.8)
  a1.set_ylabel("spread(S(L)) / spread(S(L_θ=0))")
  a2.set_ylabel("stable rank of row-centred L")
  for ax in (a1, a2):
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  a1.legend(fontsize=6, ncol=2, title="layer.head", title_fontsize=6)
  fig.suptitle(title + " — medians over probe examples, mean over seeds", fontsize=9)
  save_figure(fig, path)


def _head_styles(layers: int, heads: int):
  """``(layer, head, style)`` for every layer.head: one colour per head, one
  line style per layer (the per-head curves of the training figures)."""
  cmap = plt.get_cmap("tab10")
  for l in range(layers):
    for h in range(heads):
      yield l, h, dict(color=cmap(h % 10), ls=["-", "--", ":", "-."][l % 4])


def frequencies_over_training(rows: list[dict], theta0, path: str, title: str = "") -> None:
  """Trained frequencies (``frequencies.jsonl``): left, the median drift
  ``|log θ/θ₀|`` of every layer.head vs step (median over seeds: a frequency
  that reached or crossed 0 is infinitely far, and a mean would drop the
  point); right, the final θ of every layer.head (mean over seeds) against
  the initial θ₀."""
  if not rows:
    return
  steps = [r["step"] for r in rows]
  drift = np.median(np.asarray([r["drift_median"] for r in rows]), axis=1)  # [T, L, H]
  final = np.asarray(rows[-1]["theta"]).mean(0)                   # [L, H, F]
  _, layers, heads = drift.shape
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4), dpi=110)
  for l, h, style in _head_styles(layers, heads):
    a1.plot(steps, drift[:, l, h], label=f"{l}.{h}", **style)
    a2.plot(theta0, final[l, h], marker=".", **style)
  a2.plot(theta0, theta0, color="k", lw=0.8)
  a1.set_xlabel("step")
  a1.set_ylabel("median |log θ/θ₀| over frequencies\n(median over seeds)")
  a2.set_xscale("log")
  a2.set_yscale("symlog", linthresh=float(np.min(np.abs(theta0))) / 10)
  a2.set_xlabel("initial θ₀ (RoPE's)")
  a2.set_ylabel("final θ (mean over seeds)")
  for ax in (a1, a2):
    ax.grid(alpha=0.3)
  a1.legend(fontsize=6, ncol=2, title="layer.head", title_fontsize=6)
  fig.suptitle(title + " — trained frequencies", fontsize=9)
  save_figure(fig, path)


def learning_curves(curves: list[dict], path: str, title: str = "", *,
                    metric: str = "test_accuracy", paper_examples=None) -> None:
  """Accuracy against examples seen (log x), one line per run, band = min..max
  over seeds, line = mean; ``paper_examples`` (per model) is drawn as a
  dashed vertical line.

  ``curves``: dicts with ``label`` and ``records`` (``metrics.jsonl`` rows
  holding ``examples_seen`` and the per-seed ``metric``), optionally ``color``.
  """
  if not curves:
    return
  fig, ax = plt.subplots(figsize=(9.0, 4.2), dpi=110)
  colors = plt.cm.tab10.colors + plt.cm.Dark2.colors
  for i, c in enumerate(curves):
    recs = c["records"]
    x = np.asarray([r.get("examples_seen", r["step"]) for r in recs], float)
    a = np.asarray([r[metric] for r in recs], float) * 100.0  # [evals, seeds]
    col = c.get("color", colors[i % len(colors)])
    ax.plot(x, a.mean(1), color=col, lw=1.4, label=c["label"],
            ls="--" if c.get("dashed") else "-")
    ax.fill_between(x, a.min(1), a.max(1), color=col, alpha=0.12, lw=0)
  if paper_examples:
    ax.axvline(paper_examples, color="k", ls=":", lw=1)
    ax.text(paper_examples, 2, " paper's budget", fontsize=7, rotation=90,
            va="bottom", ha="right")
  ax.set_xscale("log")
  ax.set_xlabel("training examples seen per model (log scale)")
  ax.set_ylabel(metric.replace("_", " ") + " (%)")
  ax.set_ylim(0, 100)
  ax.grid(alpha=0.3, which="both")
  ax.set_title(title + " (line: mean over seeds; band: min..max)", fontsize=9)
  ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
  save_figure(fig, path)


def ratio_curves(panels: dict, path: str, title: str = "") -> None:
  """One panel per measure (``{ylabel: curves}``), one line per run: the
  per-seed values ``[evals, seeds]`` against examples seen (log x); line =
  mean over seeds, band = min..max; a black line at 1 (no change).

  ``curves``: dicts with ``label``, ``x`` ``[evals]``, ``values`` and
  optionally ``color``.
  """
  panels = {k: v for k, v in panels.items() if v}
  if not panels:
    return
  fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.6), dpi=110,
                           squeeze=False)
  colors = plt.cm.tab10.colors
  for ax, (ylabel, curves) in zip(axes[0], panels.items()):
    for i, c in enumerate(curves):
      x = np.asarray(c["x"], float)
      v = np.asarray(c["values"], float)  # [evals, seeds]
      col = c.get("color", colors[i % len(colors)])
      ax.plot(x, v.mean(1), color=col, lw=1.4, label=c["label"])
      ax.fill_between(x, v.min(1), v.max(1), color=col, alpha=0.15, lw=0)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("training examples seen per model (log scale)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
  fig.suptitle(title + " (line: mean over seeds; band: min..max)", fontsize=9)
  save_figure(fig, path)


def ablation_per_seed(drop, seeds, path: str, title: str = "") -> None:
  """One layers × heads heatmap of the accuracy drop (points) per seed, on a
  shared colour scale; the largest drop of each layer is annotated."""
  d = np.asarray(drop, float) * 100.0  # [seeds, layers, heads]
  n, layers, heads = d.shape
  cols = min(n, 4)
  rows = -(-n // cols)
  fig, axes = plt.subplots(rows, cols, squeeze=False, dpi=110, layout="constrained",
                           figsize=(1.0 + cols * (0.9 + 0.32 * heads),
                                    0.6 + rows * (0.8 + 0.32 * layers)))
  vmax = max(float(np.abs(d).max()), 1e-9)
  for i in range(rows * cols):
    ax = axes[i // cols][i % cols]
    if i >= n:
      ax.axis("off")
      continue
    im = ax.imshow(d[i], cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
    for l in range(layers):
      h = int(np.argmax(d[i, l]))
      ax.text(h, l, f"{d[i, l, h]:.0f}", ha="center", va="center", fontsize=6,
              color="white" if abs(d[i, l, h]) > 0.5 * vmax else "black")
    ax.set_title(f"seed {seeds[i]}", fontsize=7)
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.tick_params(labelsize=6)
  fig.suptitle(title + " — accuracy drop (points) per seed; rows = layers, "
               "columns = heads", fontsize=8)
  fig.colorbar(im, ax=axes, shrink=0.7, label="drop (points)")
  fig.savefig(path)
  plt.close(fig)


def length_curves(results: list[dict], path: str, title: str = "") -> None:
  """Test accuracy against test length (multiples of the training length):
  mean over seeds with its bootstrap CI band, one line per run
  (``experiments.lengths`` results); lengths a run cannot reach are left out."""
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for i, res in enumerate(results):
    rows = [r for r in res["lengths"] if r["mean"] is not None]
    if not rows:
      continue
    x = [r["factor"] for r in rows]
    mean = [100 * r["mean"] for r in rows]
    lo = [100 * r["ci95"][0] for r in rows]
    hi = [100 * r["ci95"][1] for r in rows]
    label = res["pe"] + (f" k={res['rope_heads']}" if res.get("rope_heads") else "") + (
        f" rp<{res['random_positions']}" if res.get("random_positions") else "") + (
        " (faithful)" if res["faithful"] else "") + (
        f", {res['rope_scaling']}" if res.get("rope_scaling", "none") != "none" else "")
    c = colors[i % len(colors)]
    ax.plot(x, mean, "o-", color=c, label=f"{label} (n={len(res['seeds'])})")
    ax.fill_between(x, lo, hi, color=c, alpha=0.2, lw=0)
  ax.set_xlabel("test length / training length")
  ax.set_ylabel("test accuracy (%)")
  ax.set_ylim(0, 100)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  if results:
    r0 = results[0]
    ax.set_title(title or f"{r0['task']}: trained at {r0['train_len']} tokens "
                 "(mean, 95% bootstrap CI over seeds)", fontsize=9)
  save_figure(fig, path, dpi=110)


def frequency_heatmaps(drop, frequencies, deposit_head, seeds, path: str,
                       title: str = "") -> None:
  """One heads x frequency-pairs heatmap per seed (``drop [seeds, heads, pairs]``,
  accuracy points lost when that head's pair is unrotated); the seed's
  deposit head (largest single-head drop) is boxed."""
  drop = np.asarray(drop, float)
  n = drop.shape[0]
  cols = min(4, n)
  rows = -(-n // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.2 * rows + 0.6), dpi=110,
                           squeeze=False)
  vmax = max(np.abs(drop).max(), 1e-6)
  for ax in axes.flat[n:]:
    ax.axis("off")
  for s, ax in enumerate(axes.flat[:n]):
    im = ax.imshow(drop[s], cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
    h = int(deposit_head[s])
    ax.add_patch(plt.Rectangle((-0.5, h - 0.5), drop.shape[2], 1, fill=False, lw=1.5,
                               ec="k"))
    ax.set_title(f"seed {seeds[s]} (deposit head {h})", fontsize=8)
    ax.set_yticks(range(drop.shape[1]))
    ax.set_xticks(range(drop.shape[2]))
    ax.set_xticklabels([f"{f:.2g}" for f in frequencies], rotation=90, fontsize=6)
    ax.set_xlabel("θ_k", fontsize=7)
    ax.set_ylabel("head", fontsize=7)
  fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="drop (points)")
  fig.suptitle(title, fontsize=9)
  fig.savefig(path, bbox_inches="tight")
  plt.close(fig)


def _lm_label(res: dict, scaling: str) -> str:
  return res["pe"] + ("" if scaling == "none" else f" + {scaling}")


def bits_per_byte_curves(results: list[dict], path: str, title: str = "") -> None:
  """Bits per byte on the test split against the evaluation length (multiples
  of the training length, log scale): mean over seeds with its bootstrap CI
  band, one line per run and RoPE scaling (``experiments.lengths`` on ``lm``
  runs); lengths a run cannot reach are left out."""
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  styles = ["o-", "s--", "^-.", "v:", "d-", "x--"]
  line = 0
  for i, res in enumerate(results):
    for j, (scaling, rows) in enumerate(res["bits_per_byte"].items()):
      rows = [r for r in rows if r["mean"] is not None]
      if not rows:
        continue
      x = [r["factor"] for r in rows]
      c = colors[line % len(colors)] if len(results) == 1 else colors[i % len(colors)]
      ax.plot(x, [r["mean"] for r in rows], styles[j % len(styles)], color=c,
              label=f"{_lm_label(res, scaling)} (n={len(res['seeds'])})")
      ax.fill_between(x, [r["ci95"][0] for r in rows], [r["ci95"][1] for r in rows],
                      color=c, alpha=0.15, lw=0)
      line += 1
  ax.set_xscale("log", base=2)
  ax.set_xlabel("evaluation length / training length")
  ax.set_ylabel("bits per byte (test split)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  if results:
    r0 = results[0]
    ax.set_title(title or f"trained at {r0['train_len']} bytes; disjoint test windows "
                 "(mean, 95% bootstrap CI over seeds)", fontsize=9)
  save_figure(fig, path, dpi=110)


def loss_by_position(res: dict, path: str, title: str = "", bins: int = 64) -> None:
  """Loss (bits) against token position at the longest evaluated length, one
  line per RoPE scaling (mean over seeds, averaged in ``bins`` equal position
  bins); the training length is marked."""
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  longest = None
  for scaling, curves in res["loss_by_position"].items():
    if not curves:
      continue
    n = max(int(k) for k in curves)
    longest = n if longest is None else max(longest, n)
    y = np.asarray(curves[str(n)], float)
    edges = np.linspace(0, y.size, min(bins, y.size) + 1).astype(int)
    xs = [(a + b - 1) / 2 for a, b in zip(edges[:-1], edges[1:])]
    ys = [y[a:b].mean() for a, b in zip(edges[:-1], edges[1:])]
    ax.plot(xs, ys, label=_lm_label(res, scaling) + f" at {n}")
  ax.axvline(res["train_len"], color="k", lw=0.8, ls=":", label="training length")
  ax.set_xlabel("token position")
  ax.set_ylabel("loss (bits per byte)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  ax.set_title(title or f"{res['pe']}: loss against position (mean over "
               f"{len(res['seeds'])} seeds)", fontsize=9)
  save_figure(fig, path, dpi=110)


def passkey_heatmap(res: dict, path: str, title: str = "") -> None:
  """Passkey accuracy (mean over seeds and keys) against prompt length and
  needle depth."""
  p = res["passkey"]
  acc = 100 * np.asarray(p["accuracy"], float).mean(0)  # [lengths, depths]
  fig, ax = plt.subplots(figsize=(5.2, 3.6))
  im = ax.imshow(acc.T, origin="lower", aspect="auto", vmin=0, vmax=100, cmap="viridis")
  ax.set_xticks(range(len(p["lengths"])), [str(n) for n in p["lengths"]])
  ax.set_yticks(range(len(p["depths"])), [f"{d:g}" for d in p["depths"]])
  for i in range(acc.shape[0]):
    for j in range(acc.shape[1]):
      ax.text(i, j, f"{acc[i, j]:.0f}", ha="center", va="center", fontsize=7,
              color="w" if acc[i, j] < 60 else "k")
  ax.set_xlabel("prompt length (bytes)")
  ax.set_ylabel("needle depth")
  fig.colorbar(im, ax=ax, label="accuracy (%)")
  ax.set_title(title or f"{res['pe']}: passkey retrieval, greedy ({len(res['seeds'])} seeds x "
               f"{len(p['keys'])} keys)", fontsize=9)
  save_figure(fig, path, dpi=110)

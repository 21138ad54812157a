r"""Spectral bounds of positional encodings vs exact extremes, with figures.

  python -m experiments.spectra                       # all PEs, n = 64,256,1024,4096
  python -m experiments.spectra --pe=alibi --n=64,512 --outdir=runs/spectra

Writes ``spectra.json`` (bounds vs exact extremes per PE and n) and three
figures to ``--outdir``:

* ``bound_tightness.png``: slack of the certified circulant enclosure and of
  Gershgorin against the exact extremes, per PE, vs n;
* ``spread_growth.png``: ALiBi's spread/(m n²) -> 0.55 vs the RoPE logit
  envelope, which is the same with and without rotation (θ-free, Theorem 6);
* ``content_contraction.png``: λ_max(RoPE)/λ_max(NoPE) for content models
  (isotropic, persistent, mean+noise, counter-rotating; Prop. 8) -- whether
  RoPE contracts depends on the content.

"Exact" is dense float64 ``eigvalsh`` where n <= --dense_max, the ALiBi closed
form, or (beyond) Lanczos inner bounds that bracket the truth with the
circulant outer bounds.
"""
from __future__ import annotations

import os
import sys
import time

from pe_spectral import xla_config

xla_config.tune_cpu()

from absl import app, flags, logging  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from pe_spectral import positional, spectral as S  # noqa: E402

SPECTRAL_PES = ("alibi", "relative", "sinusoidal", "rope")

FLAGS = flags.FLAGS
flags.DEFINE_string("pe", ",".join(SPECTRAL_PES),
                    "Comma list of PEs with a Toeplitz structure: "
                    + ", ".join(SPECTRAL_PES) + " (learned/nope have none).")
flags.DEFINE_string("n", "64,256,1024,4096", "Sequence lengths.")
flags.DEFINE_integer("d", 64, "Head / model dimension for rope and sinusoidal.")
flags.DEFINE_integer("heads", 16, "ALiBi heads (standard geometric slopes).")
flags.DEFINE_integer("dense_max", 2048, "Largest n for dense float64 eigvalsh.")
flags.DEFINE_integer("lanczos_steps", 60, "Lanczos steps beyond dense_max.")
flags.DEFINE_integer("content_samples", 4, "Random draws per content model and n.")
flags.DEFINE_string("outdir", "runs/spectra", "Output directory.")


def _exact_extremes(coeffs, dense_max, steps):
  """(λ_min, λ_max, method) of the Hermitian Toeplitz matrix of ``coeffs``."""
  coeffs = np.asarray(coeffs, np.float64)
  n = (len(coeffs) + 1) // 2
  if n <= dense_max:
    e = np.linalg.eigvalsh(np.asarray(S.toeplitz_from_coeffs(coeffs)))
    return float(e[0]), float(e[-1]), "dense"
  col = jnp.asarray(coeffs[n - 1:], jnp.float32)
  ritz = S.lanczos_ritz(S.make_toeplitz_matvec(col),
                        jax.random.normal(jax.random.key(1), (n,)), steps)
  return float(ritz[0]), float(ritz[-1]), "lanczos (inner bound)"


def _bounds_row(name, n, coeffs, exact):
  lo, hi = S.toeplitz_eig_bounds(coeffs, 2 * n - 1)
  glo, ghi = S.toeplitz_gershgorin_bounds(coeffs)
  lam_min, lam_max, method = exact
  return {"pe": name, "n": n, "lam_min": lam_min, "lam_max": lam_max,
          "exact_method": method, "circulant_lo": float(lo), "circulant_hi": float(hi),
          "gershgorin_lo": float(glo), "gershgorin_hi": float(ghi),
          "contained": bool(lo <= lam_min + 1e-6 * abs(lam_min) and
                            lam_max <= hi + 1e-6 * abs(lam_max))}


def toeplitz_rows(pes, ns, d, heads, dense_max, steps, log):
  rows = []
  slopes = positional.alibi_slopes(heads)
  t5_values = jax.random.normal(jax.random.key(0), (32,))
  for n in ns:
    t0 = time.time()
    if "alibi" in pes:
      m = float(slopes[0])  # steepest head; other heads scale linearly in m
      coeffs = S.toeplitz_coeffs(S.alibi_toeplitz(n, m)[:, 0])
      lo, hi = S.alibi_extreme_eigs(n, jnp.float32(m))
      row = _bounds_row("alibi", n, coeffs, (float(lo), float(hi), "closed form"))
      row["slope"] = m
      if n <= dense_max:  # closed form vs dense, recorded
        e = np.linalg.eigvalsh(np.asarray(S.alibi_toeplitz(n, m), np.float64))
        row["closed_form_rel_err"] = float(max(abs(e[0] - lo) / abs(e[0]),
                                               abs(e[-1] - hi) / abs(e[-1])))
      lo_all, hi_all = jax.vmap(lambda s: S.alibi_extreme_eigs(n, s))(slopes)
      row["spread_over_m_n2_all_heads"] = np.asarray(
          (hi_all - lo_all) / (slopes * n * n)).tolist()
      rows.append(row)
    if "relative" in pes:
      raw = S.t5_bias_coeffs(n, t5_values, max_distance=128)
      sym = 0.5 * (raw + raw[::-1])  # symmetric part: Hermitian Toeplitz
      rows.append(_bounds_row("relative", n, sym,
                              _exact_extremes(sym, dense_max, steps)))
    if "sinusoidal" in pes:
      coeffs = S.sinusoidal_gram_coeffs(n, d)
      rows.append(_bounds_row("sinusoidal", n, coeffs,
                              _exact_extremes(coeffs, dense_max, steps)))
    if "rope" in pes:  # the real part of one frequency's phase matrix, θ_1
      theta = float(S.rope_frequencies(d)[1])
      k = jnp.arange(-(n - 1), n)
      coeffs = jnp.cos(k * theta)
      rows.append(_bounds_row("rope (Re G_θ1)", n, coeffs,
                              _exact_extremes(coeffs, dense_max, steps)))
    log(f"n={n}: Toeplitz bounds in {time.time() - t0:.1f}s")
  return rows


def envelope_rows(ns, d, samples, dense_max):
  """RoPE vs NoPE logit symmetric-part spectra and the θ-free envelope (iid content)."""
  rows = []
  theta = S.rope_frequencies(d)
  for n in ns:
    if n > dense_max:
      continue
    for s in range(samples):
      kq, kk = jax.random.split(jax.random.key(100 + s))
      q = jax.random.normal(kq, (n, d)) / np.sqrt(d)
      k = jax.random.normal(kk, (n, d)) / np.sqrt(d)
      neg, pos, nuc = S.rope_envelope(q, k)
      row = {"n": n, "sample": s, "envelope_N": float(neg), "envelope_P": float(pos),
             "nuclear_bound": float(nuc)}
      for name, th in (("rope", theta), ("nope", jnp.zeros_like(theta))):
        l = np.asarray(S.rope_logits(q, k, th), np.float64)
        e = np.linalg.eigvalsh((l + l.T) / 2)
        row[f"{name}_lam_min"], row[f"{name}_lam_max"] = float(e[0]), float(e[-1])
      rows.append(row)
  return rows


def content_rows(ns, d, samples, dense_max):
  """Prop. 8: λ_max of the RoPE Gram vs the NoPE Gram (Q = K) per content model."""
  rows = []
  theta = S.rope_frequencies(d)
  for kind in ("isotropic", "persistent", "mean_noise", "counter_rotating"):
    for n in ns:
      if n > dense_max:
        continue
      ratios = []
      for s in range(samples):
        x = S.synthetic_content(kind, n, d, jax.random.key(1000 + s))
        l_rope = np.asarray(S.rope_logits(x, x, theta), np.float64)
        l_nope = np.asarray(x @ x.T, np.float64)
        ratios.append(np.linalg.eigvalsh(l_rope)[-1] / np.linalg.eigvalsh(l_nope)[-1])
      rows.append({"content": kind, "n": n, "lam_max_ratio": ratios,
                   "median": float(np.median(ratios))})
  return rows


def make_figures(result, outdir):
  from pe_spectral import plotting
  plotting.spectral_bound_tightness(result["toeplitz"],
                                    os.path.join(outdir, "bound_tightness.png"))
  plotting.spectral_spread_growth(result["toeplitz"], result["envelope"],
                                  os.path.join(outdir, "spread_growth.png"))
  plotting.spectral_content_contraction(result["content"],
                                        os.path.join(outdir, "content_contraction.png"))


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  pes = [p.strip() for p in FLAGS.pe.split(",") if p.strip()]
  bad = [p for p in pes if p not in SPECTRAL_PES]
  if bad or not pes:
    print(f"error: --pe must name some of {', '.join(SPECTRAL_PES)}; got {bad or pes}",
          file=sys.stderr)
    return 2
  try:
    ns = sorted({int(t) for t in FLAGS.n.split(",") if t.strip()})
  except ValueError:
    print(f"error: --n must be a comma list of ints, got {FLAGS.n!r}", file=sys.stderr)
    return 2
  if not ns or min(ns) < 2:
    print("error: every --n must be >= 2", file=sys.stderr)
    return 2
  if FLAGS.d < 2 or FLAGS.d % 2:
    print("error: --d must be even and >= 2", file=sys.stderr)
    return 2
  log = lambda msg: print(msg, file=sys.stderr, flush=True)
  result = {
      "config": {"pe": pes, "n": ns, "d": FLAGS.d, "heads": FLAGS.heads,
                 "dense_max": FLAGS.dense_max},
      "toeplitz": toeplitz_rows(pes, ns, FLAGS.d, FLAGS.heads, FLAGS.dense_max,
                                FLAGS.lanczos_steps, log),
      "envelope": envelope_rows(ns, FLAGS.d, FLAGS.content_samples, FLAGS.dense_max)
                  if "rope" in pes else [],
      "content": content_rows(ns, FLAGS.d, FLAGS.content_samples, FLAGS.dense_max)
                 if "rope" in pes else [],
  }
  os.makedirs(FLAGS.outdir, exist_ok=True)
  from pe_spectral.runner import write_json
  write_json(os.path.join(FLAGS.outdir, "spectra.json"), result)
  make_figures(result, FLAGS.outdir)
  violations = [r for r in result["toeplitz"] if not r["contained"]]
  print(f"{len(result['toeplitz'])} Toeplitz cases, {len(violations)} enclosure "
        f"violations; wrote {FLAGS.outdir}/spectra.json and figures")
  for r in result["toeplitz"]:
    print(f"  {r['pe']:<16} n={r['n']:<5} exact [{r['lam_min']:.4g}, {r['lam_max']:.4g}]"
          f"  circulant [{r['circulant_lo']:.4g}, {r['circulant_hi']:.4g}]"
          f"  gershgorin [{r['gershgorin_lo']:.4g}, {r['gershgorin_hi']:.4g}]")
  return 1 if violations else 0


if __name__ == "__main__":
  app.run(main)

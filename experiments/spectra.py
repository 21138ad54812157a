r"""Spectral bounds of positional encodings vs exact extremes, with figures.

  python -m experiments.spectra                       # every registered PE
  python -m experiments.spectra --pe=alibi,fire --n=64,512 --faithful

Every PE comes from the registry (``pe_spectral.pe.encodings``) and is analysed
as a run of ``--preset`` trains it: its own ``toeplitz_coeffs`` hook at
initialisation (ALiBi with the mode's slopes, the relative scheme of
``--relative_buckets``, KERPLE, FIRE, the input sinusoid's Gram, a rotation's
phase matrix at θ_1); head 0 is bounded (ALiBi's steepest head). A PE without
a Toeplitz form (learned table, NoPE, xPos) is listed with the reason.
Writes ``spectra.json`` (bounds vs exact extremes per PE and n) and three
figures to ``--outdir``:

* ``bound_tightness.png``: slack of the certified circulant enclosure and of
  Gershgorin against the exact extremes, per PE, vs n;
* ``spread_growth.png``: ALiBi's spread/(m n²) -> 0.55 vs the RoPE logit
  envelope, which is the same with and without rotation (θ-free, Theorem 6);
* ``content_contraction.png``: λ_max(RoPE)/λ_max(NoPE) for content models
  (isotropic, persistent, mean+noise, counter-rotating; Prop. 8) -- whether
  RoPE contracts depends on the content.

"Exact" is dense float64 ``eigvalsh`` where n <= --dense_max, a closed form
where the PE has one (ALiBi), or (beyond) Lanczos inner bounds that bracket
the truth with the circulant outer bounds.
"""
from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

from experiments import cli
from pe_spectral.nn.model import ModelConfig
from pe_spectral.pe import encodings
from pe_spectral.pe import spectral as S
from pe_spectral.training.config import MODEL_PRESETS as PRESETS

FLAGS = flags.FLAGS
flags.DEFINE_string("pe", "all", "Comma list of registered PEs, or 'all': "
                    + ", ".join(encodings.names()))
flags.DEFINE_string("pe_module", None, "A module of your own that registers PEs (a dotted "
                    "name or a .py file), loaded before --pe is read (docs/encodings.md).")
flags.DEFINE_string("n", "64,256,1024,4096", "Sequence lengths.")
flags.DEFINE_string("preset", "paper", "Model sizes the PEs are built for: "
                    + ", ".join(PRESETS))
flags.DEFINE_bool("faithful", False, "The paper's mode (ALiBi slopes exp(-h/H), ...).")
flags.DEFINE_integer("relative_buckets", None, "T5 log-buckets for 'relative' "
                     "(default: one entry per clipped offset, as the model).")
flags.DEFINE_integer("seed", 0, "PRNG seed of the PEs' initial parameters.")
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


def coupling_statement(enc) -> str:
  """Which spectral theorem the PE's coupling carries (its declared ``coupling``)."""
  if enc.coupling == "multiplicative":
    if enc.spectral_note:  # e.g. xPos: a Hadamard form without unit modulus
      return "multiplicative, no Schur guarantee: " + enc.spectral_note
    return ("multiplicative: Schur guarantee (a Hadamard product with a PSD, unit-diagonal "
            "Toeplitz matrix: λ_max(F∘G) <= λ_max(G) for PSD content G)")
  if enc.coupling == "additive":
    return ("additive: Weyl widening possible (λ(G + B) within [λ(G) + λ_min(B), "
            "λ(G) + λ_max(B)]; it can widen the spread, and need not)")
  if enc.coupling == "content_multiplicative":
    return ("content-dependent multiplicative: no Toeplitz matrix to bound; "
            + (enc.spectral_note or "its position factor depends on the tokens"))
  if enc.coupling == "content_additive":
    return ("content-dependent additive: Weyl still applies to its bias, which is not "
            "Toeplitz; " + (enc.spectral_note or "the bias depends on the tokens"))
  return "neither pure form (no position term, an absolute table, or content-dependent)"


def pe_config(pe: str, preset: str, max_len: int, *, faithful: bool = False,
              relative_buckets=None) -> ModelConfig:
  """The model config a run of ``pe`` on ``preset`` trains, long enough for ``max_len``."""
  return ModelConfig(pe=pe, **{**PRESETS[preset], "max_len": max_len}, faithful=faithful,
                     causal=encodings.get(pe).causal_only,
                     relative_buckets=relative_buckets,
                     relative_max_distance=None if relative_buckets is None else 128)


def pe_init_params(cfg: ModelConfig, key) -> dict:
  """The PE's own initial parameters (first layer's and the model's), from its hooks."""
  keys = iter(jax.random.split(key, 8))
  enc = cfg.encoding
  return {**enc.input_params(cfg, lambda: next(keys), cfg.d_model ** -0.5),
          **enc.layer_params(cfg, lambda: next(keys))}


def toeplitz_rows(cfgs, ns, dense_max, steps, log, seed=0):
  """Bounds vs exact extremes of head 0's Toeplitz matrix, per PE and n."""
  rows = []
  params = {pe: pe_init_params(cfg, jax.random.key(seed)) for pe, cfg in cfgs.items()}
  for n in ns:
    t0 = time.time()
    for pe, cfg in cfgs.items():
      enc = cfg.encoding
      coeffs = enc.toeplitz_coeffs(cfg, params[pe], n)
      if coeffs is None:
        continue
      coeffs = np.asarray(coeffs, np.float64)[0]
      ext = enc.bias_extremes(cfg, n)
      if ext is not None:
        lo, hi = (np.asarray(v, np.float64) for v in ext)
        exact = (float(lo[0]), float(hi[0]), "closed form")
      else:
        exact = _exact_extremes(coeffs, dense_max, steps)
      row = _bounds_row(pe, n, coeffs, exact)
      row["matrix"] = enc.toeplitz_label
      row["t1"] = float(coeffs[n])  # the coefficient at offset 1 (ALiBi: -m)
      if ext is not None:
        row["closed_form_spread_per_head"] = (hi - lo).tolist()
        if n <= dense_max:  # closed form vs dense, recorded
          e = np.linalg.eigvalsh(np.asarray(S.toeplitz_from_coeffs(coeffs), np.float64))
          row["closed_form_rel_err"] = float(max(abs(e[0] - exact[0]) / abs(e[0]),
                                                 abs(e[-1] - exact[1]) / abs(e[-1])))
      rows.append(row)
    log(f"n={n}: Toeplitz bounds in {time.time() - t0:.1f}s")
  return rows


def envelope_rows(ns, theta, samples, dense_max):
  """RoPE vs NoPE logit symmetric-part spectra and the θ-free envelope (iid content)."""
  rows = []
  theta = jnp.asarray(theta, jnp.float32)
  d = 2 * theta.shape[0]
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


def content_rows(ns, theta, samples, dense_max):
  """Prop. 8: λ_max of the RoPE Gram vs the NoPE Gram (Q = K) per content model."""
  rows = []
  theta = jnp.asarray(theta, jnp.float32)
  d = 2 * theta.shape[0]
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
  from pe_spectral.analysis import plotting
  plotting.spectral_bound_tightness(result["toeplitz"],
                                    os.path.join(outdir, "bound_tightness.png"))
  plotting.spectral_spread_growth(result["toeplitz"], result["envelope"],
                                  os.path.join(outdir, "spread_growth.png"))
  plotting.spectral_content_contraction(result["content"],
                                        os.path.join(outdir, "content_contraction.png"))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  if FLAGS.pe_module:
    try:
      encodings.load_module(FLAGS.pe_module)
    except ValueError as e:
      print(f"error: --pe_module: {e}", file=sys.stderr)
      return 2
  known = encodings.names()
  pes = ([p.strip() for p in FLAGS.pe.split(",") if p.strip()] if FLAGS.pe != "all"
         else list(known))
  bad = [p for p in pes if p not in known]
  if bad or not pes:
    print(f"error: --pe must name some of {', '.join(known)} (or 'all'); got {bad or pes}",
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
  if FLAGS.preset not in PRESETS:
    print(f"error: --preset must be one of {', '.join(PRESETS)}, got {FLAGS.preset!r}",
          file=sys.stderr)
    return 2
  try:
    cfgs = {p: pe_config(p, FLAGS.preset, max(ns), faithful=FLAGS.faithful,
                         relative_buckets=FLAGS.relative_buckets) for p in pes}
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  log = lambda msg: print(msg, file=sys.stderr, flush=True)
  probe = {p: c for p, c in cfgs.items()
           if c.encoding.toeplitz_coeffs(c, pe_init_params(c, jax.random.key(0)), 2) is None}
  no_toeplitz = {p: c.encoding.spectral_note or "no Toeplitz form" for p, c in probe.items()}
  rotations = [c.encoding.rotary_frequencies(c) for c in cfgs.values()]
  rotations = [t for t in rotations if t is not None and len(t) >= 2]
  theta = rotations[0] if rotations else None
  cp = lambda c: 2 * len(c) if c is not None else None
  result = {
      "config": {"pe": pes, "n": ns, "preset": FLAGS.preset, "faithful": FLAGS.faithful,
                 "relative_buckets": FLAGS.relative_buckets, "dense_max": FLAGS.dense_max,
                 "rotary_dim": cp(theta)},
      "toeplitz": toeplitz_rows({p: c for p, c in cfgs.items() if p not in probe}, ns,
                                FLAGS.dense_max, FLAGS.lanczos_steps, log, FLAGS.seed),
      "no_toeplitz": no_toeplitz,
      "coupling": {p: coupling_statement(c.encoding) for p, c in cfgs.items()},
      "envelope": envelope_rows(ns, theta, FLAGS.content_samples, FLAGS.dense_max)
                  if theta is not None else [],
      "content": content_rows(ns, theta, FLAGS.content_samples, FLAGS.dense_max)
                 if theta is not None else [],
  }
  os.makedirs(FLAGS.outdir, exist_ok=True)
  from pe_spectral.training.runner import write_json
  write_json(os.path.join(FLAGS.outdir, "spectra.json"), result)
  make_figures(result, FLAGS.outdir)
  violations = [r for r in result["toeplitz"] if not r["contained"]]
  print(f"{len(result['toeplitz'])} Toeplitz cases, {len(violations)} enclosure "
        f"violations; wrote {FLAGS.outdir}/spectra.json and figures")
  for r in result["toeplitz"]:
    print(f"  {r['pe']:<16} n={r['n']:<5} exact [{r['lam_min']:.4g}, {r['lam_max']:.4g}]"
          f"  circulant [{r['circulant_lo']:.4g}, {r['circulant_hi']:.4g}]"
          f"  gershgorin [{r['gershgorin_lo']:.4g}, {r['gershgorin_hi']:.4g}]")
  for p, note in no_toeplitz.items():
    print(f"  {p:<16} no Toeplitz bound: {note}")
  print("coupling of content and position in the logits:")
  for p, note in result["coupling"].items():
    print(f"  {p:<20} {note}")
  return 1 if violations else 0


if __name__ == "__main__":
  cli.run(main)

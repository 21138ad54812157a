"""Decomposition of a trained model's attention logits into content/position terms.

For a checkpoint and a batch of real inputs, per seed, layer and head:

* ``logits``: the pre-softmax logits ``L`` (scaled, bias added), and the
  softmax-invariant row-centred form (docs/spectral.md);
* **additive terms** on the *unrotated* queries/keys: the layer input is split
  as ``h = h_c + h_p`` where ``h_c`` is what the layer sees when the model runs
  with its input positional table removed (the content-only counterpart) and
  ``h_p = h - h_c``; then ``L_θ0 = G_cc + G_cp + G_pc + G_pp + B`` exactly
  (``B``: the additive bias -- relative, ALiBi, KERPLE, FIRE; for CoPE its
  contextual term, which depends on the content). For NoPE/bias-only models ``h_p = 0``;
* **rotary form** (every PE whose q/k transform is a rotation: RoPE, partial
  RoPE, p-RoPE, rope_sinusoidal, clean MLA's channel): the Hadamard form
  ``Re Σ_j (z_j w_j*) ∘ G_θj`` equals ``L``; the same layer's logits with the
  rotation removed (θ = 0, same inputs) are the content-only counterpart;
* **decay form** (a PE with a ``logit_factor``: ``alibi_multiplicative``):
  ``L = (q k^T/sqrt d) ∘ ρ^{|i-j|} + B``; its counterpart ``L_θ0`` is the same
  logits with ``ρ = 1``;
* spectral measures: the largest singular value of the row-centred logits, spectrum of
  the symmetric part, spread, stable rank, Toeplitz defect, the
  contraction ratio spread(S(L)) / spread(S(L_θ0)) per head (multiplicative
  PEs: the rotation or decay against none) and the widening ratio
  spread(S(L)) / spread(S(L - B)) (additive PEs: the bias against none).

Padding (clean mode) is handled by zeroing masked rows and columns of the
row-centred matrices: it adds zero eigen/singular values, nothing else.
One compiled call per layer, vmapped over seeds; heads are batched.
MLA: the decoupled rotary channel is the rotated part; its content channel
and rotary channel are also reported separately (``mla_content``/``mla_rotary``).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from pe_spectral.nn.attention import attention_weights
from pe_spectral.nn.model import PAD_ID
from pe_spectral.pe import spectral as S
from pe_spectral.pe.base import Kind
from pe_spectral.runtime import devices

__all__ = ["layer_terms", "decompose", "summarize", "attention_maps"]


def layer_terms(graphdef, params, ids, layer: int) -> dict:
  """All terms of one layer for one seed. Arrays are ``[batch, heads, n, n]``.

  MLA: each head's query/key is ``[content | rotary]`` (the decoupled rotary
  channel, ``rope_dim`` wide); the θ = 0 counterpart leaves that channel
  unrotated, and the extra terms ``mla_content`` / ``mla_rotary`` are the two
  channels' shares of ``L`` (they sum to ``L - B``). The Hadamard form is given
  for a true rotation only: the paper's faithful MLA transform is not one.
  """
  model = nnx.merge(graphdef, params)
  cfg = model.cfg
  _, e, xs = model.forward(ids)
  _, e_c, xs_c = model.forward(ids, input_pe=False)
  block = model.blocks[layer]
  attn = block.attn
  h = cfg.num_heads
  n = ids.shape[1]
  positions = jnp.arange(n)
  hq, hq_c = block.ln1(xs[layer]), block.ln1(xs_c[layer])
  hk, hk_c = block.kv_input(hq, e), block.kv_input(hq_c, e_c)
  # Unrotated projections, split into content (bias included) and position
  # parts: every projection is affine, so the position part is linear.
  q_c, q_p, k_c, k_p, q_rot, k_rot = attn.decompose_qk(hq, hq_c, hk, hk_c, positions)
  scale = 1.0 / math.sqrt(q_c.shape[-1])  # MLA: 1/sqrt(head_dim + rope_dim)
  gram = lambda a, b: jnp.einsum("bqhd,bkhd->bhqk", a, b) * scale
  bias = block.bias(n)
  bias = jnp.zeros((h, n, n)) if bias is None else bias
  kinds = cfg.encoding.kinds
  if Kind.CONTEXTUAL in kinds:
    # CoPE, PaTH: a term from q and k (and the layer's input); part of B (no
    # rotation to remove)
    bias = bias + block.content_bias(q_rot, k_rot, model.attention_mask(ids), x=hq)
  if Kind.GATED in kinds:
    # alibi_data: a bias from the layer's input, part of B as ALiBi's is
    bias = bias + block.gate_bias(hq, model.attention_mask(ids))
  q, k = q_c + q_p, k_c + k_p  # the model's unrotated q, k
  content_theta0 = gram(q, k)
  if Kind.DYNAMIC in kinds:
    # the PE's own transform (PoPE, rope_learned) at the positions, and with
    # every position 0 as the θ = 0 counterpart (PoPE keeps its softplus
    # magnitudes and key phase there: only position is removed; CARoPE's
    # phases are then equal on every token, so they cancel in q·k)
    q_rot, k_rot = block.qk_fn(positions, x=hq)(q, k)
    content_theta0 = gram(*block.qk_fn(jnp.zeros_like(positions), x=hq)(q, k))
  # a multiplicative decay (alibi_multiplicative): the θ = 0 / ρ = 1
  # counterpart drops it, as it drops a rotation
  factor = block.logit_factor(n)
  logits_theta0 = content_theta0 + bias
  out = {"G_cc": gram(q_c, k_c), "G_cp": gram(q_c, k_p), "G_pc": gram(q_p, k_c),
         "G_pp": gram(q_p, k_p), "B": jnp.broadcast_to(bias, logits_theta0.shape),
         "logits_theta0": logits_theta0}
  content = gram(q_rot, k_rot)
  out["logits"] = (content if factor is None else content * factor) + bias
  qh, kh = jnp.moveaxis(q, 2, 1), jnp.moveaxis(k, 2, 1)  # [b, h, n, d]
  freqs = cfg.rotary_frequencies()  # None unless the q/k transform is a rotation
  c = attn.rotary_channel_start  # a decoupled rotary channel (MLA), or None
  if c is not None:
    out["mla_content"] = gram(q_rot[..., :c], k_rot[..., :c])
    out["mla_rotary"] = gram(q_rot[..., c:], k_rot[..., c:])
    if freqs is not None:
      theta = jnp.asarray(freqs, jnp.float32)
      had = S.rope_logits(qh[..., c:], kh[..., c:], theta) * scale
      out["hadamard"] = gram(q[..., :c], k[..., :c]) + had + bias
  elif cfg.num_rope_heads and freqs is not None:
    theta = jnp.asarray(freqs, jnp.float32)
    # Hadamard form per head: [b, h, n, d] -> Re Σ_j (z_j w_j*) ∘ G_θj
    had = S.rope_logits(qh, kh, theta, pairing=cfg.pairing) * scale
    rotated = (jnp.arange(h) < cfg.num_rope_heads)[None, :, None, None]
    out["hadamard"] = jnp.where(rotated, had, gram(q, k)) + bias
  return out


def _spectra(masked, centred):
  """``(eigs [4, ..., n], sv_max [2, ...], frob2 [2, ...])``: the spectra of
  the symmetric parts of ``masked``, and the largest singular value and the
  squared Frobenius norm of ``centred``, with ONE batched LAPACK call (XLA:CPU
  deadlock, see :func:`summarize`): σ² are the eigenvalues of the Gram C Cᵀ,
  so σ_max² = λ_max(C Cᵀ) to float32 relative precision; ‖C‖_F² is exact."""
  gram = centred @ jnp.swapaxes(centred, -1, -2)
  eig_all = jnp.linalg.eigvalsh(jnp.concatenate([S.symmetric_part(masked), gram]))
  return (eig_all[:4], jnp.sqrt(jnp.maximum(eig_all[4:, ..., -1], 0.0)),
          (centred ** 2).sum((-2, -1)))


def _layer_summary(graphdef, params, ids, layer: int, spectra=_spectra):
  """One seed's summary of one layer; ``spectra`` is :func:`_spectra`'s
  decomposition (benchmarks/lapack_deadlock.py swaps in the two-call one it
  replaced)."""
  t = layer_terms(graphdef, params, ids, layer)
  mask = ids != PAD_ID
  m2 = (mask[:, None, :, None] & mask[:, None, None, :])  # [b, 1, n, n]
  mats = jnp.stack([t["logits"], t["logits_theta0"], t["B"],
                    t["logits"] - t["B"]])                      # [4, b, h, n, n]
  masked = jnp.where(m2, mats, 0.0)
  centred = S.row_center(mats[:2], m2)                       # [2, b, h, n, n]
  eig, sv_max, frob2 = spectra(masked, centred)    # [4, b, h, n], [2, b, h], [2, b, h]
  spread = S.spectral_spread(eig)                            # [4, b, h]
  meas = {"sv_max": sv_max[0], "sym_eigs": eig[0], "spread": spread[0],
          "stable_rank": frob2[0] / jnp.maximum(sv_max[0] ** 2, 1e-30),
          "toeplitz_defect": S.toeplitz_defect(masked[0])}
  additive_sum = t["G_cc"] + t["G_cp"] + t["G_pc"] + t["G_pp"] + t["B"]
  scale = jnp.abs(t["logits_theta0"]).max() + 1e-30
  res = {
      "measures": meas,
      "contraction_ratio": spread[0] / jnp.maximum(spread[1], 1e-30),
      "norm_ratio": sv_max[0] / jnp.maximum(sv_max[1], 1e-30),
      # the four Grams + B sum to the θ = 0 logits when those are q·k + B
      # (not PoPE's: softplus magnitudes are not linear in content + position)
      "additive_residual": (jnp.abs(additive_sum - t["logits_theta0"]).max() / scale
                            if nnx.merge(graphdef, params).cfg.encoding.bilinear_logits
                            else jnp.float32(jnp.nan)),
      # Weyl: spread(S(L)) >= spread(S(B)) - spread(S(L - B)) for additive biases.
      "bias_spread": spread[2],
      "without_bias_spread": spread[3],
      "widening_ratio": spread[0] / jnp.maximum(spread[3], 1e-30),
      "term_norms": {k: jnp.linalg.norm(t[k], axis=(-2, -1))
                     for k in ("G_cc", "G_cp", "G_pc", "G_pp", "B", "mla_content",
                               "mla_rotary") if k in t},
  }
  if "hadamard" in t:
    res["hadamard_residual"] = jnp.abs(t["hadamard"] - t["logits"]).max() / (
        jnp.abs(t["logits"]).max() + 1e-30)
  return res


@functools.partial(jax.jit, static_argnums=(0, 3))
def _summary_all_seeds(graphdef, params, ids, layer):
  return jax.vmap(lambda p: _layer_summary(graphdef, p, ids, layer))(params)


def summarize(graphdef, params, ids, num_layers: int) -> list[dict]:
  """Per-layer summaries for seed-stacked ``params`` (one compiled call per layer).

  Each entry holds ``[seeds, batch, heads]`` measures, the contraction ratio
  RoPE-vs-θ=0 (1 for non-rotary models), term norms and the residuals of the
  two exact identities (``additive_residual``, ``hadamard_residual``).

  Each compiled call holds one LAPACK call (a batched ``eigvalsh``) and the
  next layer's call starts only when the last one is done. jaxlib 0.10's
  batched LAPACK kernels split their batch over XLA:CPU's intra-op thread
  pool from inside a pool thread and block until it is done; two such calls
  running at once on a 2-core machine (pool of 2) each hold a thread and wait
  for work only the other could run: a deadlock with every thread idle. It
  was seen with ``eigvalsh`` beside ``svd`` in this program (at XLA -O0, as
  the tests compile, after 43-339 programs; benchmarks/lapack_deadlock.py);
  two programs in flight at once would pose the same risk.
  """
  out = []
  for l in range(num_layers):
    out.append(_summary_all_seeds(graphdef, params, ids, l))
    # one LAPACK call in flight (see above); the wait polls: Ctrl-C answers
    devices.wait_ready(out[-1])
  return out


def decompose(graphdef, params, ids, layer: int) -> dict:
  """The raw terms of one layer for seed-stacked ``params`` (``[seeds, batch, heads, n, n]``)."""
  return jax.vmap(lambda p: layer_terms(graphdef, p, ids, layer))(params)


def attention_maps(graphdef, params, ids, layer: int) -> jax.Array:
  """Attention probabilities of one layer for seed-stacked ``params``:
  ``[seeds, batch, heads, n, n]``, each row the softmax over keys of the
  logits :func:`layer_terms` computes (``"logits"``), masked as the model
  masks them (padding in clean mode, future keys when causal); the
  stick-breaking weights for a PE whose normalisation they are."""
  def one(p):
    logits = layer_terms(graphdef, p, ids, layer)["logits"]
    model = nnx.merge(graphdef, p)
    mask = model.attention_mask(ids)  # [batch, 1, q, k] or None
    return attention_weights(logits, mask, logits.dtype,
                             model.cfg.encoding.normalisation(model.cfg))
  return jax.vmap(one)(params)

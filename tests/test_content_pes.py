"""The content-dependent and learned-frequency PEs (pope, rope_learned,
alibi_data, carope) against float64 loops written from their papers' formulas,
their identities (PoPE without position = softplus-content attention;
rope_learned at its initial θ = rope; alibi_data with constant gates = ALiBi;
carope with a constant frequency = rope with that frequency), the CLIs on
them, and a researcher's PE loaded from a module of their own."""
import json
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_cli_batch

from pe_spectral.nn import attention as A
from pe_spectral.nn.model import ModelConfig, apply_model, init_model
from pe_spectral.pe import encodings
from pe_spectral.pe import positional as P

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cfg(pe, **kw):
  base = dict(pe=pe, vocab_size=7, num_classes=3, d_model=16, num_heads=2, num_layers=2,
              d_ff=32, max_len=12, dropout=0.0)
  return ModelConfig(**{**base, **kw})


def _softplus64(x):
  return np.logaddexp(0.0, x)


# --- float64 loops, written from the formulas --------------------------------

def _pope_logits_loop(q, k, pos, theta, delta):
  """Σ_c softplus(q_c) softplus(k_c) cos((p_j - p_i) θ_c + δ_hc) / sqrt(d):
  q, k [n, heads, d] float64; returns [heads, n, n]."""
  n, h, d = q.shape
  out = np.zeros((h, n, n))
  for hh in range(h):
    for i in range(n):
      for j in range(n):
        s = 0.0
        for c in range(d):
          s += (_softplus64(q[i, hh, c]) * _softplus64(k[j, hh, c])
                * math.cos((pos[j] - pos[i]) * theta[c] + delta[hh, c]))
        out[hh, i, j] = s / math.sqrt(d)
  return out


def _turn64(x, angles):
  """Pair (2j, 2j+1) of the float64 vector ``x`` turned by ``angles[j]``."""
  y = np.empty(len(x))
  for j, a in enumerate(angles):
    y[2 * j] = x[2 * j] * math.cos(a) - x[2 * j + 1] * math.sin(a)
    y[2 * j + 1] = x[2 * j] * math.sin(a) + x[2 * j + 1] * math.cos(a)
  return y


def _turned_logits_loop(q, k, angles):
  """q_i turned by angles[i, h] dotted with k_j turned by angles[j, h], / sqrt(d):
  q, k [n, heads, d], angles [n, heads, d/2], float64 -> [heads, n, n]."""
  n, h, d = q.shape
  out = np.zeros((h, n, n))
  for hh in range(h):
    for i in range(n):
      for j in range(n):
        out[hh, i, j] = (_turn64(q[i, hh], angles[i, hh]) @ _turn64(k[j, hh], angles[j, hh])
                         / math.sqrt(d))
  return out


def _rope_logits_loop(q, k, pos, theta):
  """Each pair (2j, 2j+1) of head h turned by pos θ_hj, in float64: [heads, n, n]."""
  n, h, d = q.shape
  angles = np.array([[[pos[i] * theta[hh, j] for j in range(d // 2)] for hh in range(h)]
                     for i in range(n)])
  return _turned_logits_loop(q, k, angles)


def _carope_logits_loop(q, k, x, w, b):
  """CARoPE (arXiv 2507.23083, section 2), float64: f_th = 1/(softplus(x_t·W_h
  + b_h) + 1), φ_i^h(m) = Σ_{t=0}^{m} f_th^i, pair (2i, 2i+1) of head h at
  token m turned by φ_i^h(m); q, k [n, heads, d], x [n, d_model] -> [heads, n, n]."""
  n, h, d = q.shape
  f = np.empty((n, h))
  for t in range(n):
    for hh in range(h):
      f[t, hh] = 1.0 / (_softplus64(float(x[t] @ w[:, hh]) + b[hh]) + 1.0)
  phi = np.zeros((n, h, d // 2))
  for m in range(n):
    for hh in range(h):
      for i in range(d // 2):
        phi[m, hh, i] = sum(f[t, hh] ** i for t in range(m + 1))
  return _turned_logits_loop(q, k, phi)


def _gate_bias_loop(log_f, causal):
  """bias[h, i, j] = Σ_{t=j+1}^{i} log f_t (j <= i), Σ_{t=i+1}^{j} log f'_t (j > i)."""
  n, g = log_f.shape
  h = g if causal else g // 2
  out = np.zeros((h, n, n))
  for hh in range(h):
    for i in range(n):
      for j in range(n):
        if j <= i:
          out[hh, i, j] = sum(log_f[t, hh] for t in range(j + 1, i + 1))
        elif not causal:
          out[hh, i, j] = sum(log_f[t, h + hh] for t in range(i + 1, j + 1))
  return out


def test_pope_transform_equals_the_float64_loop():
  rng = np.random.default_rng(0)
  n, h, d = 6, 2, 8
  q, k = rng.normal(size=(2, n, h, d)) * 1.5
  pos = np.sort(rng.choice(40, n, replace=False))  # randomized positions too
  theta = P.pope_frequencies(d, 100.0)
  delta = rng.uniform(-2 * np.pi, 0.0, (h, d))
  q2, k2 = P.pope_transform(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                            jnp.asarray(pos)[:, None], theta, delta)
  assert q2.shape == (n, h, 2 * d)
  got = np.asarray(A.attention_logits(q2[None], k2[None], scale=1 / math.sqrt(d)))[0]
  np.testing.assert_allclose(got, _pope_logits_loop(q, k, pos, theta, delta),
                             rtol=2e-5, atol=2e-5)
  # PoPE's own frequencies: d of them, θ_c = base^(-c/d)
  np.testing.assert_allclose(theta, 100.0 ** (-np.arange(d) / d))
  # δ outside [-2π, 0] is clamped, as the reference implementation
  q3, k3 = P.pope_transform(q, k, pos[:, None], theta, delta + 10.0)
  q4, k4 = P.pope_transform(q, k, pos[:, None], theta, np.zeros((h, d)))
  np.testing.assert_allclose(np.asarray(k3), np.asarray(k4), atol=1e-6)


def test_pope_without_position_is_softplus_content_attention():
  """δ = 0 and every θ = 0: attention on softplus(q), softplus(k), no position."""
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 5, 2, 4)), jnp.float32) for _ in range(3))
  q2, k2 = P.pope_transform(q, k, np.arange(5)[:, None], np.zeros(4))
  scale = 0.5
  want = A.attention(jax.nn.softplus(q), jax.nn.softplus(k), v, scale=scale)
  np.testing.assert_allclose(np.asarray(A.attention(q2, k2, v, scale=scale)),
                             np.asarray(want), rtol=1e-5, atol=1e-6)


def test_forget_gate_bias_equals_the_loop_and_constant_gates_are_alibi():
  rng = np.random.default_rng(2)
  n, h = 7, 3
  for causal in (False, True):
    g = h if causal else 2 * h
    log_f = np.log(rng.uniform(0.2, 1.0, (n, g)))
    got = np.asarray(P.forget_gate_bias(jnp.asarray(log_f[None], jnp.float32), causal=causal))
    np.testing.assert_allclose(got[0], _gate_bias_loop(log_f, causal), rtol=1e-5, atol=1e-5)
    # constant gates log f = -m_h (both directions): ALiBi with slopes m
    m = np.asarray(P.alibi_slopes(h))
    const = np.tile(-m, (n, g // h))[None]
    alibi = np.asarray(P.alibi_bias(n, m, causal=causal))
    tri = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
    got = np.asarray(P.forget_gate_bias(jnp.asarray(const, jnp.float32), causal=causal))[0]
    np.testing.assert_allclose(np.where(tri, got, 0), np.where(tri, alibi, 0), atol=1e-5)


def _block_logits(cfg, params, ids, positions=None):
  """The first layer's logits as the model computes them, captured where the
  softmax reads them (attention.softmax_probs)."""
  captured = []
  orig = A.softmax_probs

  def spy(q, k, bias, mask, scale, dtype, factor=None):
    captured.append(np.asarray(
        A.attention_logits(q * scale, k, bias=bias, scale=1.0, factor=factor)))
    return orig(q, k, bias, mask, scale, dtype, factor)

  A.softmax_probs = spy
  try:
    from pe_spectral.runtime import speed
    with speed.reference():
      apply_model(init_model(cfg, jax.random.key(0))[0], params, ids)
  finally:
    A.softmax_probs = orig
  return captured[0][0]  # layer 0, first example: [heads, n, n]


def _layer0_qk(cfg, params, ids):
  """Layer 0's projected queries/keys [n, heads, d] and normed input, float64."""
  from pe_spectral.nn.model import merge_for_compute
  model = merge_for_compute(init_model(cfg, jax.random.key(0))[0], params)
  x = model.embed_inputs(ids)
  blk = model.blocks[0]
  h = blk.ln1(x)
  q = blk.attn._heads(blk.attn.q_proj(h))
  k = blk.attn._heads(blk.attn.k_proj(h))
  return (np.asarray(q, np.float64)[0], np.asarray(k, np.float64)[0],
          np.asarray(h, np.float64)[0], blk)


@pytest.mark.parametrize("pe", ["pope", "rope_learned", "alibi_data", "carope"])
def test_the_model_computes_the_papers_logits(pe):
  """Layer 0's logits inside the model equal the float64 loop of the PE's
  formula on the model's own projections and (perturbed) PE parameters."""
  cfg = _cfg(pe)
  graphdef, params = init_model(cfg, jax.random.key(0))
  rng = np.random.default_rng(3)
  d = cfg.head_dim
  params = jax.tree.map(lambda x: x, params)  # a pure dict: edit a copy
  blk = params["blocks"][0]
  if pe == "pope":
    blk["pope_phase"] = jnp.asarray(rng.uniform(-2 * np.pi, 0, (2, d)), jnp.float32)
  elif pe == "rope_learned":
    blk["rope_theta"] = blk["rope_theta"] * jnp.asarray(rng.uniform(0.5, 2.0, (2, d // 2)),
                                                        jnp.float32)
  elif pe == "carope":  # frequencies that differ by token and head
    blk["carope_w"] = jnp.asarray(rng.normal(size=blk["carope_w"].shape), jnp.float32)
    blk["carope_b"] = jnp.asarray(rng.normal(size=blk["carope_b"].shape), jnp.float32)
  else:
    blk["gate_b"] = jnp.asarray(rng.normal(size=blk["gate_b"].shape), jnp.float32)
  ids = jnp.asarray(rng.integers(1, cfg.vocab_size, (1, 9)))
  got = _block_logits(cfg, params, ids)
  q, k, h, _ = _layer0_qk(cfg, params, ids)
  pos = np.arange(9)
  if pe == "pope":
    want = _pope_logits_loop(q, k, pos, P.pope_frequencies(d, cfg.rope_base),
                             np.asarray(blk["pope_phase"], np.float64))
  elif pe == "rope_learned":
    want = _rope_logits_loop(q, k, pos, np.asarray(blk["rope_theta"], np.float64))
  elif pe == "carope":
    want = _carope_logits_loop(q, k, h, np.asarray(blk["carope_w"], np.float64),
                               np.asarray(blk["carope_b"], np.float64))
  else:
    gl = h @ np.asarray(blk["gate_w"], np.float64) + np.asarray(blk["gate_b"], np.float64)
    log_f = -np.logaddexp(0.0, -gl)  # log sigmoid
    want = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(d) + _gate_bias_loop(log_f, False)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_causal_alibi_data_is_the_forgetting_transformers_bias():
  """FoX (Lin et al. 2025; zhixuan-lin/forgetting-transformer, ``fgate_type="full"``):
  ``f_t = σ(w_h·x_t + b_h)`` from the attention layer's (normed) input and
  ``D_ij = Σ_{l=j+1}^{i} log f_l`` added to ``q_i·k_j/√d`` for ``j <= i``. Causal
  ``alibi_data``'s layer-0 logits equal that loop in float64 (one gate set per
  head); what FoX adds beyond the bias (its "Pro" block: QK-norm, output gate
  and norm, key/value shift) is not here, and its gate init differs
  (N(0, 0.02²) and bias 0 there)."""
  cfg = _cfg("alibi_data", causal=True)
  graphdef, params = init_model(cfg, jax.random.key(0))
  params = jax.tree.map(lambda x: x, params)
  rng = np.random.default_rng(11)
  blk = params["blocks"][0]
  assert blk["gate_w"].shape == (cfg.d_model, cfg.num_heads)  # one gate set: causal
  blk["gate_w"] = jnp.asarray(rng.normal(size=blk["gate_w"].shape), jnp.float32)
  blk["gate_b"] = jnp.asarray(rng.normal(size=blk["gate_b"].shape), jnp.float32)
  n = 9
  ids = jnp.asarray(rng.integers(1, cfg.vocab_size, (1, n)))
  got = _block_logits(cfg, params, ids)
  q, k, x, _ = _layer0_qk(cfg, params, ids)
  w, b = np.asarray(blk["gate_w"], np.float64), np.asarray(blk["gate_b"], np.float64)
  want = np.zeros((cfg.num_heads, n, n))
  for h in range(cfg.num_heads):
    log_f = [math.log(1.0 / (1.0 + math.exp(-(x[t] @ w[:, h] + b[h])))) for t in range(n)]
    for i in range(n):
      for j in range(i + 1):
        want[h, i, j] = q[i, h] @ k[j, h] / math.sqrt(cfg.head_dim) + sum(log_f[j + 1:i + 1])
  below = np.tril(np.ones((n, n), bool))  # above the diagonal the causal mask decides
  np.testing.assert_allclose(got[:, below], want[:, below], rtol=1e-4, atol=1e-4)


def _comrope_params(cfg, seed):
  """Layer-0 params with ComRoPE generators drawn away from their init."""
  graphdef, params = init_model(cfg, jax.random.key(0))
  params = jax.tree.map(lambda x: x, params)
  rng = np.random.default_rng(seed)
  blk = params["blocks"][0]
  blk["comrope_p"] = jnp.asarray(rng.normal(size=blk["comrope_p"].shape), jnp.float32)
  blk["comrope_scale"] = jnp.asarray(rng.uniform(0.5, 2.0, blk["comrope_scale"].shape),
                                     jnp.float32)
  return graphdef, params, blk


def test_comrope_logits_equal_the_float64_matrix_exponential_loop():
  """ComRoPE-LD (its reference code's ComRoPELDAttention, one axis): query i
  and key j of head h, block m, turned by scipy's float64 expm((x/L) s_m (P - Pᵀ))
  at x = i and x = j; layer 0's logits are their dot products over √d. The
  rotation is orthogonal and the logits relative (a shift of every position
  changes nothing), and comrope_angles are the generators' eigen-angles."""
  from scipy.linalg import expm
  cfg = _cfg("comrope")
  graphdef, params, blk = _comrope_params(cfg, 4)
  n, d, b = 9, cfg.head_dim, cfg.pe_options.block
  ids = jnp.asarray(np.random.default_rng(5).integers(1, cfg.vocab_size, (1, n)))
  got = _block_logits(cfg, params, ids)
  q, k, _, _ = _layer0_qk(cfg, params, ids)
  p64 = np.asarray(blk["comrope_p"], np.float64)
  s64 = np.asarray(blk["comrope_scale"], np.float64)
  want = np.zeros((cfg.num_heads, n, n))
  for h in range(cfg.num_heads):
    gens = [s64[m] * (p64[h, m] - p64[h, m].T) for m in range(d // b)]
    turn = lambda v, x: np.concatenate([expm(x / cfg.max_len * g) @ v[m * b:(m + 1) * b]
                                        for m, g in enumerate(gens)])
    for i in range(n):
      for j in range(n):
        want[h, i, j] = turn(q[i, h], i) @ turn(k[j, h], j) / math.sqrt(d)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  enc = encodings.get("comrope")
  qk = jnp.asarray(np.random.default_rng(6).normal(size=(1, n, cfg.num_heads, d)), jnp.float32)
  pos = jnp.arange(n)[:, None]
  logits = lambda a, c: np.einsum("bihd,bjhd->bhij", np.asarray(a), np.asarray(c))
  base = logits(*enc.layer_qk(cfg, blk, qk, qk, pos))
  np.testing.assert_allclose(logits(*enc.layer_qk(cfg, blk, qk, qk, pos + 7)), base,
                             rtol=1e-4, atol=1e-4)
  turned = np.asarray(enc.layer_qk(cfg, blk, qk, qk, pos)[0])
  np.testing.assert_allclose(np.linalg.norm(turned, axis=-1),
                             np.linalg.norm(np.asarray(qk), axis=-1), rtol=1e-5)
  gens = np.asarray(enc.generators(blk), np.float64)
  eig = np.sort(np.abs(np.linalg.eigvals(gens).imag), axis=-1)
  np.testing.assert_allclose(np.asarray(P.comrope_angles(jnp.asarray(gens))), eig,
                             rtol=1e-6, atol=1e-6)
  slowest = np.where(eig > 1e-12, eig, np.inf).min(axis=(-2, -1)) / cfg.max_len
  offs = np.arange(-(n - 1), n)
  np.testing.assert_allclose(np.asarray(enc.toeplitz_coeffs(cfg, blk, n)),
                             np.cos(offs[None, :] * slowest[:, None]), rtol=1e-5, atol=1e-5)


def test_comrope_with_two_wide_blocks_is_rope_with_its_trained_frequencies():
  """Block width 2: each generator is ``[[0, -ω], [ω, 0]]``, ``ω = s (P₁₀ - P₀₁)``,
  so ComRoPE turns the interleaved pairs as RoPE with frequencies ``ω / max_len``."""
  cfg = _cfg("comrope", pe_options={"block": 2})
  _, _, blk = _comrope_params(cfg, 7)
  n = 11
  qk = jnp.asarray(np.random.default_rng(8).normal(size=(2, n, cfg.num_heads, cfg.head_dim)),
                   jnp.float32)
  pos = jnp.arange(n)[:, None]
  got_q, got_k = encodings.get("comrope").layer_qk(cfg, blk, qk, 2 * qk, pos)
  pm, s = np.asarray(blk["comrope_p"]), np.asarray(blk["comrope_scale"])
  theta = s * (pm[..., 1, 0] - pm[..., 0, 1]) / cfg.max_len  # [heads, d/2]
  angles = np.arange(n)[:, None, None] * theta  # [seq, heads, d/2]
  np.testing.assert_allclose(np.asarray(got_q), np.asarray(P.rotate(qk, angles)),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(got_k), np.asarray(P.rotate(2 * qk, angles)),
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="comrope's block"):
    _cfg("comrope", pe_options={"block": 3})
  assert _cfg("comrope").pe_options.block == 4  # the default where 4 divides head_dim
  assert _cfg("comrope", d_model=12, num_heads=2).pe_options.block == 2
  from pe_spectral.nn.model import check_freq_mask
  with pytest.raises(ValueError, match="pe='comrope' declares none a mask can switch"):
    check_freq_mask(cfg, jnp.ones((cfg.num_layers, cfg.num_heads, 1)))


@pytest.mark.parametrize("causal", [False, True])
def test_dape_logits_equal_the_reference_formula_and_a_zero_mlp_is_alibi(causal):
  """DAPE (its reference code's AliBi_DAPE): layer 0's logits are
  ``x + a + MLP([x; a])`` at every (i, j), x the heads' content logits
  q·k/√d, a ALiBi's bias (Press et al.'s slopes; the lower triangle causally,
  -m|i-j| bidirectionally), the MLP Linear(2H, W), LeakyReLU(0.01),
  Linear(W, H) -- a float64 loop here; with the MLP's output layer zero the
  logits are ALiBi's."""
  cfg = _cfg("dape", causal=causal, pe_options={"width": 5})
  graphdef, params = init_model(cfg, jax.random.key(0))
  params = jax.tree.map(lambda x: x, params)
  blk = params["blocks"][0]
  rng = np.random.default_rng(12)
  for name in ("dape_w1", "dape_b1", "dape_w2", "dape_b2"):
    blk[name] = jnp.asarray(rng.normal(size=blk[name].shape), jnp.float32)
  n, h, d = 9, cfg.num_heads, cfg.head_dim
  ids = jnp.asarray(rng.integers(1, cfg.vocab_size, (1, n)))
  got = _block_logits(cfg, params, ids)
  q, k, _, _ = _layer0_qk(cfg, params, ids)
  w1, b1, w2, b2 = (np.asarray(blk[x], np.float64) for x in ("dape_w1", "dape_b1",
                                                              "dape_w2", "dape_b2"))
  m = np.asarray(P.alibi_slopes(h), np.float64)
  leaky = lambda v: np.where(v > 0, v, 0.01 * v)
  want = np.zeros((h, n, n))
  for i in range(n):
    for j in range(n):
      x = np.array([q[i, hh] @ k[j, hh] / math.sqrt(d) for hh in range(h)])
      a = -m * abs(i - j) if (j <= i or not causal) else np.zeros(h)
      want[:, i, j] = x + a + leaky(np.concatenate([x, a]) @ w1 + b1) @ w2 + b2
  rows = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
  np.testing.assert_allclose(got[:, rows], want[:, rows], rtol=1e-4, atol=1e-4)
  blk["dape_w2"], blk["dape_b2"] = jnp.zeros_like(blk["dape_w2"]), jnp.zeros_like(blk["dape_b2"])
  got = _block_logits(cfg, params, ids)
  content = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(d)
  alibi = np.asarray(P.alibi_bias(n, P.alibi_slopes(h), causal=causal), np.float64)
  np.testing.assert_allclose(got[:, rows], (content + alibi)[:, rows], rtol=1e-4, atol=1e-4)


def test_rope_learned_at_its_initial_frequencies_is_rope():
  rng = np.random.default_rng(4)
  ids = jnp.asarray(rng.integers(1, 7, (3, 10)))
  out = {}
  for pe in ("rope", "rope_learned"):
    g, p = init_model(_cfg(pe), jax.random.key(5))  # rope_learned draws no key
    out[pe] = np.asarray(apply_model(g, p, ids))
  np.testing.assert_allclose(out["rope_learned"], out["rope"], rtol=1e-5, atol=1e-6)
  # and it moves away from rope once θ moves
  g, p = init_model(_cfg("rope_learned"), jax.random.key(5))
  p["blocks"][0]["rope_theta"] = p["blocks"][0]["rope_theta"] * 1.5
  assert np.abs(np.asarray(apply_model(g, p, ids)) - out["rope"]).max() > 1e-4


@pytest.mark.parametrize("c", [None, 0.5])
def test_carope_with_a_constant_frequency_is_rope_with_that_frequency(c):
  """W = 0 makes f the constant 1/(softplus(b) + 1); CARoPE is then RoPE whose
  θ_1 is that constant (base c^(-d/2)). None: the initialisation, RoPE's own
  θ_1 at the default base. Different tokens' frequencies break it."""
  rng = np.random.default_rng(9)
  ids = jnp.asarray(rng.integers(1, 7, (3, 10)))
  d = _cfg("rope").head_dim
  g, p = init_model(_cfg("carope"), jax.random.key(5))  # carope draws no key
  base = _cfg("rope").rope_base
  if c is not None:
    for blk in p["blocks"].values():
      blk["carope_b"] = jnp.full_like(blk["carope_b"], P.inv_softplus(1.0 / c - 1.0))
    base = c ** (-d / 2)
  g_r, p_r = init_model(_cfg("rope", rope_base=base), jax.random.key(5))
  want = np.asarray(apply_model(g_r, p_r, ids))
  np.testing.assert_allclose(np.asarray(apply_model(g, p, ids)), want, rtol=1e-5, atol=1e-5)
  p["blocks"][0]["carope_w"] = jnp.asarray(rng.normal(size=(16, 2)), jnp.float32)
  assert np.abs(np.asarray(apply_model(g, p, ids)) - want).max() > 1e-4


def test_carope_phases_cancel_without_position_and_a_masked_pair_stays_put():
  """Every position equal (decompose's θ = 0 counterpart): every token gets the
  same phase, and q'·k' = q·k. A frequency mask of 0 leaves that pair unturned."""
  rng = np.random.default_rng(10)
  b, n, h, d = 2, 7, 3, 8
  f = jnp.asarray(rng.uniform(0.1, 0.9, (b, n, h)), jnp.float32)
  q, k = (jnp.asarray(rng.normal(size=(b, n, h, d)), jnp.float32) for _ in range(2))
  flat = P.carope_phases(f, np.zeros(n, int), d // 2)
  np.testing.assert_allclose(np.einsum("bqhd,bkhd->bhqk", P.rotate(q, flat), P.rotate(k, flat)),
                             np.einsum("bqhd,bkhd->bhqk", q, k), rtol=1e-4, atol=1e-4)
  # in order: the cumulative sum of f^i (pair 0: f^0 = 1, RoPE's θ_0 = 1)
  phases = np.asarray(P.carope_phases(f, np.arange(n), d // 2))
  f64 = np.asarray(f, np.float64)
  np.testing.assert_allclose(phases, np.cumsum(f64[..., None] ** np.arange(d // 2), axis=1),
                             rtol=1e-5)
  mask = np.ones((h, d // 2))
  mask[1, 2] = 0.0
  masked = P.carope_phases(f, np.arange(n), d // 2, jnp.asarray(mask))
  assert np.all(np.asarray(masked)[:, :, 1, 2] == 0.0)
  np.testing.assert_allclose(np.asarray(masked)[:, :, 0], phases[:, :, 0], rtol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_data_with_constant_gates_is_alibi(causal):
  ids = jnp.asarray(np.random.default_rng(6).integers(1, 7, (3, 10)))
  g_data, p_data = init_model(_cfg("alibi_data", causal=causal), jax.random.key(7))
  g_alibi, p_alibi = init_model(_cfg("alibi", causal=causal), jax.random.key(7))
  pure = p_data
  m = np.asarray(P.alibi_slopes(2), np.float64)
  b = -np.log(np.expm1(m))  # log σ(b) = -m
  for blk in pure["blocks"].values():
    blk["gate_w"] = jnp.zeros_like(blk["gate_w"])
    blk["gate_b"] = jnp.asarray(np.tile(b, blk["gate_b"].shape[0] // 2), jnp.float32)
  # ALiBi gets alibi_data's weights: the same model but for the gates
  shared = {k: v for k, v in pure.items() if k != "blocks"}
  shared["blocks"] = {i: {k: v for k, v in blk.items() if k not in ("gate_w", "gate_b")}
                      for i, blk in pure["blocks"].items()}
  assert jax.tree.structure(shared) == jax.tree.structure(p_alibi)
  p_alibi = shared
  np.testing.assert_allclose(np.asarray(apply_model(g_data, p_data, ids)),
                             np.asarray(apply_model(g_alibi, p_alibi, ids)),
                             rtol=1e-5, atol=1e-5)


# --- PaTH: accumulated Householder transforms --------------------------------

def _householder_loop(q, k, w, beta):
  """q_iᵀ H_i ⋯ H_{j+1} k_j for j <= i (H_t = I - β_t w_t w_tᵀ), 0 above,
  by explicit float64 matrix products: q, k, w [n, heads, d], beta [n, heads]
  -> [heads, n, n] (unscaled)."""
  n, h, d = q.shape
  out = np.zeros((h, n, n))
  for hh in range(h):
    for i in range(n):
      for j in range(i + 1):
        m = np.eye(d)
        for t in range(i, j, -1):
          m = m @ (np.eye(d) - beta[t, hh] * np.outer(w[t, hh], w[t, hh]))
        out[hh, i, j] = q[i, hh] @ m @ k[j, hh]
  return out


def test_path_ut_transform_equals_the_explicit_householder_products():
  """path_correction (the paper's UT transform, one triangular solve) plus
  q·k equals the float64 products for β across (0, 2) and directions of
  norms in [0.3, 1] (H_t stays a contraction); nothing above the diagonal.
  37 tokens: the solve's blocks of 16 rows, the last one short."""
  rng = np.random.default_rng(13)
  b, n, h, d = 2, 37, 3, 5
  q, k, w = (rng.normal(size=(b, n, h, d)) for _ in range(3))
  w *= rng.uniform(0.3, 1.0, (b, n, h, 1)) / np.linalg.norm(w, axis=-1, keepdims=True)
  beta = rng.uniform(0.05, 1.95, size=(b, n, h))
  got = np.asarray(P.path_correction(*(jnp.asarray(a, jnp.float32) for a in (q, k, w, beta))))
  for bb in range(b):
    want = _householder_loop(q[bb], k[bb], w[bb], beta[bb])
    want -= np.tril(np.einsum("ihd,jhd->hij", q[bb], k[bb]))
    np.testing.assert_allclose(got[bb], want, rtol=1e-4, atol=1e-4)
  # the dense operators P[i, j] = H_i ⋯ H_{j+1} say the same, and each is a
  # contraction for unit directions (eigenvalues of H_t: 1 and 1 - β_t)
  unit = w[0, :, 0] / np.linalg.norm(w[0, :, 0], axis=-1, keepdims=True)
  ops = np.asarray(P.path_transport(jnp.asarray(unit, jnp.float32),
                                    jnp.asarray(beta[0, :, 0], jnp.float32)), np.float64)
  for i in range(n):
    for j in range(n):
      m = np.eye(d)
      for t in range(i, j, -1):
        m = m @ (np.eye(d) - beta[0, t, 0] * np.outer(unit[t], unit[t]))
      np.testing.assert_allclose(ops[i, j], m, atol=1e-5)
  assert np.linalg.norm(ops, ord=2, axis=(-2, -1)).max() <= 1 + 1e-5
  one = np.eye(d) - beta[0, 3, 0] * np.outer(unit[3], unit[3])
  np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(one)),
                             np.sort(np.r_[1 - beta[0, 3, 0], np.ones(d - 1)]), atol=1e-12)


def test_path_with_one_fixed_direction_is_a_toeplitz_factor_on_a_rank_one_gram():
  """With the same unit w and β at every token, H^(i-j) = I - (1 - (1-β)^(i-j)) w wᵀ,
  so PaTH's term is -(1 - (1-β)^(i-j)) (q_i·w)(w·k_j): a lower-triangular
  Toeplitz matrix times a rank-one content Gram, elementwise (closed form)."""
  rng = np.random.default_rng(14)
  n, h, d = 9, 2, 4
  q, k = (rng.normal(size=(1, n, h, d)) for _ in range(2))
  u = rng.normal(size=(h, d))
  u /= np.linalg.norm(u, axis=-1, keepdims=True)
  beta = np.array([0.4, 1.7])
  w = np.broadcast_to(u, (1, n, h, d))
  got = np.asarray(P.path_correction(*(jnp.asarray(a, jnp.float32) for a in
                                       (q, k, w, np.broadcast_to(beta, (1, n, h))))))[0]
  off = np.arange(n)[:, None] - np.arange(n)[None, :]
  for hh in range(h):
    factor = np.where(off >= 0, 1 - (1 - beta[hh]) ** np.maximum(off, 0), 0.0)
    gram = np.outer(q[0, :, hh] @ u[hh], k[0, :, hh] @ u[hh])
    np.testing.assert_allclose(got[hh], -factor * gram, rtol=1e-4, atol=1e-5)


def _path_model(rank=3, conv=3):
  cfg = _cfg("path", causal=True, pe_options={"rank": rank, "conv": conv})
  _, params = init_model(cfg, jax.random.key(0))
  params = jax.tree.map(lambda x: x, params)
  rng = np.random.default_rng(15)
  for blk in params["blocks"].values():
    for name in ("path_w_down", "path_w_up", "path_conv", "path_beta_w", "path_beta_b"):
      blk[name] = jnp.asarray(rng.normal(size=blk[name].shape), jnp.float32)
  return cfg, params


def test_the_model_computes_paths_logits_and_zero_directions_are_nope():
  """Layer 0's logits are (q_iᵀ H_i ⋯ H_{j+1} k_j)/√d with the reference's
  directions written here in float64 -- x W_down W_up, a causal width-3
  depthwise convolution, SiLU, unit norm per head -- and β = 2σ(x u + b);
  with W_up = 0 (every H_t = I) the whole model equals NoPE with its weights."""
  cfg, params = _path_model()
  n, h, d = 8, cfg.num_heads, cfg.head_dim
  ids = jnp.asarray(np.random.default_rng(16).integers(1, cfg.vocab_size, (1, n)))
  got = _block_logits(cfg, params, ids)
  q, k, x, _ = _layer0_qk(cfg, params, ids)
  blk = {name: np.asarray(v, np.float64) for name, v in params["blocks"][0].items()
         if name.startswith("path_")}
  u = x @ blk["path_w_down"] @ blk["path_w_up"]  # [n, heads*d]
  conv = blk["path_conv"]  # [K, heads*d]
  y = np.zeros_like(u)
  for t in range(n):
    for s in range(conv.shape[0]):
      src = t - (conv.shape[0] - 1) + s
      if src >= 0:
        y[t] += conv[s] * u[src]
  y = (y / (1 + np.exp(-y))).reshape(n, h, d)
  w = y / np.sqrt((y * y).sum(-1, keepdims=True) + 1e-6)
  beta = 2 / (1 + np.exp(-(x @ blk["path_beta_w"] + blk["path_beta_b"])))
  want = _householder_loop(q, k, w, beta) / math.sqrt(d)
  rows = np.tril(np.ones((n, n), bool))
  np.testing.assert_allclose(got[:, rows], want[:, rows], rtol=1e-4, atol=1e-4)
  assert np.abs(want - np.tril(np.einsum("ihd,jhd->hij", q, k)) / math.sqrt(d)).max() > 1e-2
  # every |logit| <= |q_i||k_j|/√d: the transforms are contractions
  bound = np.linalg.norm(q, axis=-1).T[:, :, None] * np.linalg.norm(k, axis=-1).T[:, None, :]
  assert np.all(np.abs(got[:, rows]) <= bound[:, rows] / math.sqrt(d) + 1e-4)
  for b in params["blocks"].values():
    b["path_w_up"] = jnp.zeros_like(b["path_w_up"])
  g_path = init_model(cfg, jax.random.key(0))[0]
  g_nope, p_nope = init_model(_cfg("nope", causal=True), jax.random.key(0))
  shared = {key: v for key, v in params.items() if key != "blocks"}
  shared["blocks"] = {i: {key: v for key, v in b.items() if not key.startswith("path_")}
                      for i, b in params["blocks"].items()}
  assert jax.tree.structure(shared) == jax.tree.structure(p_nope)
  ids = jnp.asarray(np.random.default_rng(17).integers(1, cfg.vocab_size, (3, 10)))
  np.testing.assert_allclose(np.asarray(apply_model(g_path, params, ids)),
                             np.asarray(apply_model(g_nope, shared, ids)), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="pe='path' is defined for causal attention only"):
    _cfg("path")


# --- stick-breaking attention ------------------------------------------------

def _stick_loop(z, visible):
  """A_ij = σ(z_ij) ∏_{l visible, l > j} (1 - σ(z_il)) for visible (i, j), in
  float64 products: z [n, n] -> [n, n]."""
  n = z.shape[0]
  sig = lambda x: 1.0 / (1.0 + math.exp(-x))
  out = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      if visible[i, j]:
        a = sig(z[i, j])
        for l in range(j + 1, n):
          if visible[i, l]:
            a *= 1.0 - sig(z[i, l])
        out[i, j] = a
  return out


@pytest.mark.parametrize("current", [False, True])
def test_stick_breaking_weights_equal_the_float64_products(current):
  """The reference's weights (fla naive_stickbreaking_attn) against products
  in float64, with a padding mask; each row sums to 1 - ∏(1 - σ(z_ij)); with
  every logit c they are σ(c) σ(-c)^(i-1-j) (σ(c) σ(-c)^(i-j) when a query
  takes its own share): a geometric recency decay."""
  rng = np.random.default_rng(18)
  n = 9
  z = rng.normal(size=(2, 3, n, n)) * 2
  keys = np.arange(n)[None, None, None, :] < np.array([n, 6])[:, None, None, None]
  got = np.asarray(A.stick_breaking_weights(jnp.asarray(z, jnp.float32), jnp.asarray(keys),
                                            attend_current=current))
  tri = np.tril(np.ones((n, n), bool), 0 if current else -1)
  for b in range(2):
    for h in range(3):
      vis = tri & keys[b, 0]
      want = _stick_loop(z[b, h], vis)
      np.testing.assert_allclose(got[b, h], want, rtol=1e-5, atol=1e-6)
      left = np.prod(np.where(vis, 1 - 1 / (1 + np.exp(-z[b, h])), 1.0), axis=-1)
      np.testing.assert_allclose(got[b, h].sum(-1), 1 - left, rtol=1e-5, atol=1e-6)
  c = 0.7
  flat = np.asarray(A.stick_breaking_weights(jnp.full((n, n), c), attend_current=current))
  i, j = np.arange(n)[:, None], np.arange(n)[None, :]
  s = 1 / (1 + math.exp(-c))
  decay = s * (1 - s) ** np.maximum(i - j - (0 if current else 1), 0)
  np.testing.assert_allclose(flat, np.where(tri, decay, 0.0), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("current", [False, True])
def test_a_stick_breaking_model_attends_with_those_weights(current):
  """Layer 0's head outputs are Σ_j A_ij v_j with A from float64 products of
  the layer's own q·k/√d (the causal mask, the rows' remainders dropped); the
  first token's output is zero unless a query takes its own share; it is
  causal only, and the library attention refuses it in one line."""
  from pe_spectral.nn.model import merge_for_compute
  cfg = _cfg("stickbreaking", causal=True, pe_options={"attend_current": current})
  graphdef, params = init_model(cfg, jax.random.key(0))
  n, h, d = 8, cfg.num_heads, cfg.head_dim
  ids = jnp.asarray(np.random.default_rng(19).integers(1, cfg.vocab_size, (1, n)))
  model = merge_for_compute(graphdef, params)
  x = model.embed_inputs(ids)
  blk = model.blocks[0]
  got = np.asarray(blk.head_outputs(x, x, positions=np.arange(n),
                                    mask=model.attention_mask(ids)), np.float64)[0]
  q, k, hn, _ = _layer0_qk(cfg, params, ids)
  v = np.asarray(blk.attn._heads(blk.attn.v_proj(jnp.asarray(hn, jnp.float32))), np.float64)
  tri = np.tril(np.ones((n, n), bool), 0 if current else -1)
  for hh in range(h):
    weights = _stick_loop(q[:, hh] @ k[:, hh].T / math.sqrt(d), tri)
    np.testing.assert_allclose(got[:, hh], weights @ v[:, hh], rtol=1e-4, atol=1e-5)
  assert (np.abs(got[0]).max() == 0.0) != current
  with pytest.raises(ValueError, match="defined for causal attention only"):
    _cfg("stickbreaking")
  with pytest.raises(ValueError, match="whose weights are stickbreaking"):
    _cfg("stickbreaking", causal=True, attention_impl="xla", dropout=0.0)


def test_couplings_are_declared_in_the_extended_vocabulary():
  assert encodings.get("pope").coupling == "content_multiplicative"
  assert encodings.get("alibi_data").coupling == "content_additive"
  assert encodings.get("rope_learned").coupling == "multiplicative"
  assert encodings.get("carope").coupling == "content_multiplicative"
  bad = encodings.NoPE()
  bad.name, bad.coupling = "odd_coupling", "sideways"
  with pytest.raises(ValueError, match="coupling"):
    encodings.register(bad)


# --- the CLIs, and a researcher's own PE -----------------------------------

def _cli(module, *args, cwd, ok=True):
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                       text=True, cwd=cwd, env=env)
  if ok:
    assert out.returncode == 0, f"{module} {args}:\n{out.stderr[-3000:]}"
  return out


# A researcher's module: rope_learned written outside the package, under
# another name, from the library's public pieces only.
OUTSIDE_PE = textwrap.dedent('''
    import jax.numpy as jnp
    from pe_spectral.pe import encodings
    from pe_spectral.pe import positional as P

    class MyLearnedRope(encodings.PositionalEncoding):
      name = "my_learned_rope"
      description = "RoPE with trained per-head frequencies, from a module of my own"
      coupling = "multiplicative"
      kinds = ("dynamic",)
      reads = ("rope_base",)

      def frequency_count(self, cfg):
        return cfg.head_dim // 2

      def frequencies(self, cfg):
        return P.rope_inverse_frequencies(cfg.head_dim, cfg.rope_base)

      def layer_params(self, cfg, next_key):
        theta = jnp.asarray(self.frequencies(cfg), jnp.float32)
        return {"rope_theta": jnp.tile(theta, (cfg.num_heads, 1))}

      def layer_qk(self, cfg, params, q, k, positions, freq_mask=None):
        theta = params["rope_theta"] if freq_mask is None else params["rope_theta"] * freq_mask
        angles = jnp.asarray(positions, jnp.float32)[..., None] * theta
        return P.rotate(q, angles), P.rotate(k, angles)

    encodings.register(MyLearnedRope())
''')


@pytest.mark.long
def test_content_pes_and_an_outside_module_through_the_clis(tmp_path):
  """sweep -> ablate (heads and frequencies) -> decompose -> lengths on the
  new PEs and on a PE from the researcher's own file, each CLI a new process
  that finds the file again from the run's config; a clash is one line."""
  mod = tmp_path / "my_pes.py"
  mod.write_text(OUTSIDE_PE)
  # path and stickbreaking: causal only, so their runs are causal
  pes = ["pope", "alibi_data", "my_learned_rope", "carope", "path", "stickbreaking"]
  _cli("experiments.sweep", f"--pe={','.join(pes)}", f"--pe_module={mod}", "--preset=smoke",
       "--seeds=2", "--steps=6", "--eval_every=6", "--task=even_pairs", cwd=tmp_path)
  wds = [str(tmp_path / "runs" / "even_pairs" / f"{pe}-smoke-steps6") for pe in pes]
  with open(os.path.join(wds[2], "config.json")) as f:
    assert json.load(f)["run"]["model"]["pe_module"] == str(mod)
  with open(os.path.join(wds[0], "config.json")) as f:
    assert "pe_module" not in json.load(f)["run"]["model"]  # a package PE records none
  with open(os.path.join(wds[4], "config.json")) as f:  # set for PaTH, and recorded
    assert json.load(f)["run"]["model"]["causal"] is True
  for out in run_cli_batch("experiments.ablate",  # both command lines in one process
                           [([f"--workdir={wds[0]},{wds[2]},{wds[3]}", "--frequencies"], tmp_path),
                            ([f"--workdir={wds[1]},{wds[4]},{wds[5]}"], tmp_path)]):
    assert out.returncode == 0, out.stderr[-3000:]
  _cli("experiments.decompose", f"--workdir={','.join(wds)}", "--examples=8", cwd=tmp_path)
  _cli("experiments.lengths", f"--workdir={','.join(wds)}", "--factors=1,2",
       "--examples=50", cwd=tmp_path)
  for pe, wd in zip(pes, wds):
    with open(os.path.join(wd, "ablation.json")) as f:
      abl = json.load(f)
    assert np.asarray(abl["ablated"]).shape == (2, 2, 2)
    with open(os.path.join(wd, "decompose.json")) as f:
      dec = json.load(f)
    assert dec["pe"] == pe
    if pe == "pope":  # softplus magnitudes: the θ = 0 logits are not q·k, no identity
      assert dec["additive_residual_max"] is None
    else:
      assert dec["additive_residual_max"] < 1e-4
    with open(os.path.join(wd, "lengths.json")) as f:
      assert all(r["mean"] is not None for r in json.load(f)["lengths"])
  with open(os.path.join(wds[0], "ablation-freq.json")) as f:
    freq = json.load(f)
  with open(os.path.join(wds[0], "config.json")) as f:
    m = json.load(f)["run"]["model"]
  head_dim = m["d_model"] // m["num_heads"]
  # PoPE: one frequency per channel, base^(-c/d)
  np.testing.assert_allclose(freq["frequencies"], P.pope_frequencies(head_dim, m["rope_base"]))
  # the outside module is the built-in rope_learned by another name: equal at init
  ids = jnp.asarray(np.random.default_rng(8).integers(1, 7, (2, 9)))
  try:
    outs = [np.asarray(apply_model(*init_model(_cfg(pe, **kw), jax.random.key(0)), ids))
            for pe, kw in (("rope_learned", {}), ("my_learned_rope", {"pe_module": str(mod)}))]
  finally:  # the registry is this process's: leave it as the other tests expect
    encodings.unregister("my_learned_rope")
  assert "my_learned_rope" not in encodings.names()
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)
  # a module that registers a taken name: one line, no traceback
  clash = tmp_path / "clash.py"
  clash.write_text("from pe_spectral import encodings\n"
                   "class R(encodings.PositionalEncoding):\n  name = 'rope'\n"
                   "encodings.register(R())\n")
  out = _cli("experiments.sweep", f"--pe_module={clash}", "--pe=rope", "--preset=smoke",
             "--steps=1", cwd=tmp_path, ok=False)
  assert out.returncode != 0
  assert "'rope' is already registered" in out.stderr and "Traceback" not in out.stderr


# --- PoPE's spectrum (docs/spectral.md): against dense eigvalsh -------------

def _pope_channel(mq, mk, theta, delta):
  n = mq.shape[0]
  off = np.arange(n)[None, :] - np.arange(n)[:, None]  # j - i
  return np.diag(mq) @ np.cos(off * theta + delta) @ np.diag(mk)


def test_pope_cosine_eigenvalues_closed_form():
  from pe_spectral.pe import spectral as S
  for n in (2, 5, 17, 64):
    for theta in (0.0, 1e-3, 0.3, 1.0, np.pi / 2, np.pi, 2.5):
      small, big = S.pope_cosine_eigs(n, theta)
      eig = np.linalg.eigvalsh(_pope_channel(np.ones(n), np.ones(n), theta, 0.0))
      np.testing.assert_allclose(eig[-1], big, atol=1e-9 * n)
      np.testing.assert_allclose(eig[-2] if n > 1 else 0.0, small, atol=1e-9 * n)
      if n > 2:
        np.testing.assert_allclose(eig[:-2], 0.0, atol=1e-9 * n)


def test_pope_ostrowski_and_weyl_bounds_hold_and_the_norm_bound_too():
  from pe_spectral.pe import spectral as S
  rng = np.random.default_rng(9)
  for trial in range(20):
    n, d = rng.integers(3, 40), rng.integers(1, 9)
    mag = _softplus64(rng.normal(scale=2.0, size=(n, d)))
    theta = P.pope_frequencies(d, float(rng.choice([10.0, 1e4])))
    delta = rng.uniform(-2 * np.pi, 0.0, d)
    scale = 1 / math.sqrt(d)
    L = scale * sum(_pope_channel(mag[:, c], mag[:, c], theta[c], delta[c]) for c in range(d))
    eig = np.linalg.eigvalsh(0.5 * (L + L.T))
    lo, hi = S.pope_symmetric_bounds(mag, theta, delta, scale=scale)
    tol = 1e-9 * max(1.0, abs(lo), abs(hi))
    assert lo - tol <= eig[0] and eig[-1] <= hi + tol, (trial, lo, eig[0], eig[-1], hi)
    # per channel, Ostrowski: λ_k(cos δ D C D) = cos δ t_k λ_k(C), t_k in [min D², max D²]
    for c in range(d):
      e = np.linalg.eigvalsh(0.5 * (lambda m: m + m.T)(
          _pope_channel(mag[:, c], mag[:, c], theta[c], delta[c])))
      small, big = S.pope_cosine_eigs(n, theta[c])
      lam_c = np.sort(np.cos(delta[c]) * np.array([small, big]))
      nz = e[np.argsort(np.abs(e))[-2:]]  # the two eigenvalues of largest modulus
      m2 = mag[:, c] ** 2
      for lam, got in zip(lam_c, np.sort(nz)):
        lo_c, hi_c = sorted([lam * m2.min(), lam * m2.max()])
        assert lo_c - 1e-8 * n <= got <= hi_c + 1e-8 * n
    # different magnitudes for queries and keys: only the norm bound holds
    mk = _softplus64(rng.normal(size=(n, d)))
    L2 = scale * sum(_pope_channel(mag[:, c], mk[:, c], theta[c], delta[c]) for c in range(d))
    assert np.linalg.norm(L2, 2) <= S.pope_norm_bound(mag, mk, scale=scale) * (1 + 1e-12)


def test_rope_learned_records_its_frequencies_over_training(tmp_path):
  """frequencies.jsonl: θ at every evaluation, equal to the checkpoint's, and
  the drift from RoPE's θ computed by hand."""
  from pe_spectral.training import config, runner
  rc = config.build("smoke", "distance", "rope_learned", steps=6)
  wd = str(tmp_path / "run")
  runner.run(rc, [0, 1], wd, runner.RunOptions(eval_every=3), runner.Hooks(notify=lambda m: None))
  with open(os.path.join(wd, "frequencies.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows] == [3, 6]
  theta = np.asarray(rows[-1]["theta"])  # [seeds, layers, heads, F]
  cfg = rc.model
  assert theta.shape == (2, cfg.num_layers, cfg.num_heads, cfg.head_dim // 2)
  run = runner.load_run(wd, notify=lambda m: None)
  for layer in range(cfg.num_layers):
    blocks = run.states["params"]["blocks"]
    saved = np.asarray(blocks[layer if layer in blocks else str(layer)]["rope_theta"])
    np.testing.assert_allclose(theta[:, layer], saved, rtol=1e-6)
  theta0 = P.rope_inverse_frequencies(cfg.head_dim, cfg.rope_base)
  ratio = theta / theta0  # a frequency that crossed 0 is infinitely far (documented)
  with np.errstate(invalid="ignore", divide="ignore"):
    by_hand = np.median(np.where(ratio > 0, np.abs(np.log(np.abs(ratio))), np.inf), axis=-1)
  np.testing.assert_allclose(rows[-1]["drift_median"], by_hand, rtol=1e-9, atol=1e-12)
  assert by_hand.max() > 0  # θ trains
  assert os.path.exists(os.path.join(wd, "frequencies.png"))

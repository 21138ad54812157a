"""The coupling controls: RoPE's kernel coupled additively (rope_additive) and
ALiBi's kernel coupled multiplicatively (alibi_multiplicative), against float64
loops, the KMS matrix's positive definiteness and Schur's bound."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_fast_matches_reference

from pe_spectral.nn import attention
from pe_spectral.nn.model import ModelConfig, apply_model, init_model
from pe_spectral.pe import encodings
from pe_spectral.pe import positional as P
from pe_spectral.pe import spectral as S
from pe_spectral.runtime import speed


def test_rotary_cos_bias_matches_loop_and_its_toeplitz_coeffs():
  rng = np.random.default_rng(0)
  w = rng.normal(size=(3, 4))
  theta = P.rope_inverse_frequencies(8, 100.0)
  n = 7
  want = np.zeros((3, n, n))
  for h in range(3):
    for i in range(n):
      for j in range(n):
        want[h, i, j] = sum(w[h, k] * math.cos((i - j) * 100.0 ** (-2 * k / 8))
                            for k in range(4))
  np.testing.assert_allclose(P.rotary_cos_bias(w, theta, n), want, atol=1e-5)
  coeffs = P.rotary_cos_coeffs(w, theta, n)
  for h in range(3):
    np.testing.assert_allclose(S.toeplitz_from_coeffs(coeffs[h]), want[h], atol=1e-5)
  pos = jnp.asarray([0, 2, 3, 9, 10, 14, 20])  # arbitrary positions: the same formula
  got = P.rotary_cos_bias(w, theta, n, positions=pos)
  i, j = 3, 5
  assert abs(float(got[1, i, j]) - sum(w[1, k] * math.cos((9 - 14) * theta[k])
                                       for k in range(4))) < 1e-5
  with pytest.raises(ValueError, match=r"weights must be \[heads, 4\]"):
    P.rotary_cos_bias(w[:, :3], theta, n)
  with pytest.raises(ValueError, match="positions must be"):
    P.rotary_cos_bias(w, theta, n, positions=pos[:4])


def test_decay_factor_is_kms_positive_definite_unit_diagonal_and_matches_loop():
  slopes = np.asarray([0.25, 0.0625, 1.0, 3.0])
  rhos = P.decay_rates(slopes)
  np.testing.assert_allclose(rhos, np.exp(-slopes), rtol=1e-6)
  n = 12
  f = np.asarray(P.decay_factor(n, rhos), np.float64)
  for h in range(4):
    for i in range(n):
      for j in range(n):
        assert abs(f[h, i, j] - math.exp(-slopes[h]) ** abs(i - j)) < 1e-6
    np.testing.assert_allclose(np.diag(f[h]), 1.0)
    eig = np.linalg.eigvalsh(f[h])
    # KMS closed-form bounds: (1-ρ)/(1+ρ) < λ < (1+ρ)/(1-ρ)
    r = math.exp(-slopes[h])
    assert eig[0] > (1 - r) / (1 + r) - 1e-6 and eig[-1] < (1 + r) / (1 - r) + 1e-6
    assert eig[0] > 0
    np.testing.assert_allclose(S.toeplitz_from_coeffs(P.decay_coeffs(n, rhos)[h]), f[h],
                               atol=1e-6)


def test_schur_bound_holds_for_the_decay_while_an_additive_bias_only_obeys_weyl():
  """λ_max(F ∘ G) <= λ_max(G) for PSD G and the KMS factor F (unit diagonal,
  PSD): the Hadamard product contracts, whatever the content. The additive
  twin G + B only obeys Weyl's inequalities: it widens the spread of
  isotropic content, yet narrows it when the content has a shared mean
  (G's top eigenvector is then near the all-ones vector, along which ALiBi's
  bias is most negative) -- "can widen", not "widens"."""
  rng = np.random.default_rng(1)
  n, d = 24, 6
  f = np.asarray(P.decay_factor(n, P.decay_rates(np.asarray([0.3]))), np.float64)[0]
  alibi = -0.3 * np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
  eb = np.linalg.eigvalsh(alibi)
  widened = {"isotropic": 0, "shared_mean": 0}
  for _trial in range(10):
    for kind in widened:
      x = rng.normal(size=(n, d)) + (3 * rng.normal(size=(1, d)) if kind == "shared_mean"
                                     else 0.0)
      g = x @ x.T
      eg, eh = np.linalg.eigvalsh(g), np.linalg.eigvalsh(f * g)
      assert eh[-1] <= eg[-1] * (1 + 1e-9)
      assert eh[-1] <= np.max(np.diag(g)) * np.linalg.eigvalsh(f)[-1] * (1 + 1e-9)
      assert eh[0] >= -1e-9  # Schur product theorem: still PSD
      ea = np.linalg.eigvalsh(g + alibi)
      assert eg[-1] + eb[0] - 1e-9 <= ea[-1] <= eg[-1] + eb[-1] + 1e-9  # Weyl
      assert eg[0] + eb[0] - 1e-9 <= ea[0] <= eg[0] + eb[-1] + 1e-9
      widened[kind] += (ea[-1] - ea[0]) > (eg[-1] - eg[0])
  assert widened == {"isotropic": 10, "shared_mean": 0}
  # and for a non-symmetric content matrix (q != k): S(F ∘ G) = F ∘ S(G), so the
  # decay's recorded contraction ratio is <= 1 by construction, whatever was learned
  for _trial in range(10):
    g = rng.normal(size=(n, d)) @ rng.normal(size=(d, n)) + rng.normal()
    ratio = float(S.hadamard_contraction_ratio(S.symmetric_part(g), f))
    direct = np.ptp(np.linalg.eigvalsh(S.symmetric_part(f * g))) / np.ptp(
        np.linalg.eigvalsh(S.symmetric_part(g)))
    assert ratio == pytest.approx(direct, rel=1e-4) and direct <= 1 + 1e-9


@pytest.mark.parametrize("fast", [True, False])
def test_attention_factor_matches_loop_and_autodiff(fast):
  kq, kk, kv, kf, kb = jax.random.split(jax.random.key(0), 5)
  b, n, h, d = 2, 5, 3, 4
  q = jax.random.normal(kq, (b, n, h, d))
  k = jax.random.normal(kk, (b, n, h, d))
  v = jax.random.normal(kv, (b, n, h, d))
  fac = jax.random.uniform(kf, (h, n, n), minval=0.2, maxval=1.0)
  bias = jax.random.normal(kb, (h, n, n))
  mask = jnp.asarray([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
  qn, kn, vn, fn, bn = (np.asarray(a, np.float64) for a in (q, k, v, fac, bias))
  want = np.zeros((b, n, h, d))
  for bb in range(b):
    for hh in range(h):
      logit = (qn[bb, :, hh] @ kn[bb, :, hh].T) / 2.0 * fn[hh] + bn[hh]
      logit = np.where(np.asarray(mask[bb, 0]), logit, -np.inf)
      p = np.exp(logit - logit.max(-1, keepdims=True))
      p /= p.sum(-1, keepdims=True)
      want[bb, :, hh] = p @ vn[bb, :, hh]
  call = lambda q, k, v, fac, bias: attention.attention(q, k, v, bias=bias, mask=mask,
                                                        factor=fac)
  if fast:
    got = call(q, k, v, fac, bias)
  else:
    with speed.reference():
      got = call(q, k, v, fac, bias)
  np.testing.assert_allclose(got, want, atol=1e-5)
  loss = lambda *a: (call(*a) ** 2).sum()
  g_fast = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, fac, bias)
  with speed.reference():
    g_ref = jax.grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, fac, bias)
  for a, r in zip(g_fast, g_ref):  # the custom VJP, factor gradient included
    np.testing.assert_allclose(a, r, atol=2e-5, rtol=1e-4)


def test_multiplicative_decay_model_equals_content_logits_times_factor():
  """At ρ = 1 (slope 0) alibi_multiplicative is NoPE exactly; the model's
  fast and reference paths agree with dropout on."""
  small = dict(vocab_size=23, num_classes=5, d_model=16, num_heads=2, num_layers=2,
               d_ff=32, max_len=12)
  cfg = ModelConfig(pe="alibi_multiplicative", **small)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (3, 12), 1, 23)
  key = jax.random.key(3)
  loss = lambda p: (apply_model(graphdef, p, ids, dropout_key=key) ** 2).sum()
  assert_fast_matches_reference(loss, params, rtol=1e-5, atol=1e-5)
  enc = encodings.get("alibi_multiplicative")
  orig = enc.slopes
  try:
    enc.slopes = lambda c: jnp.zeros((c.num_heads,))
    g_n, p_n = init_model(ModelConfig(pe="nope", **small), jax.random.key(0))
    np.testing.assert_allclose(apply_model(graphdef, params, ids), apply_model(g_n, p_n, ids),
                               atol=1e-6)
  finally:
    enc.slopes = orig


@pytest.mark.parametrize("init", ["lecun", "torch"])
def test_rope_additive_init_scale_matches_rope_logits(init):
  """The documented init: the additive bias at a non-zero offset has the
  standard deviation of RoPE's layer-0 logits at initialisation (within 30 %)."""
  from flax import nnx
  base = dict(vocab_size=200, num_classes=5, d_model=64, num_heads=4, num_layers=1,
              d_ff=128, max_len=48, dropout=0.0, init_scheme=init)
  ids = jax.random.randint(jax.random.key(1), (16, 48), 1, 200)
  logit_std, bias_std = [], []
  for seed in range(4):
    cfg = ModelConfig(pe="rope", **base)
    model = nnx.merge(*init_model(cfg, jax.random.key(seed)))
    blk = model.blocks[0]
    h = blk.ln1(model.embed_inputs(ids))
    q, k = blk.attn.project_qk(h, h, np.arange(48))
    logit_std.append(float(jnp.std(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 4.0)))
    cfg_a = ModelConfig(pe="rope_additive", **base)
    m_a = nnx.merge(*init_model(cfg_a, jax.random.key(seed)))
    bias = m_a.blocks[0].bias(48)
    off = ~np.eye(48, dtype=bool)
    bias_std.append(float(jnp.std(bias[:, off])))
  ratio = np.mean(bias_std) / np.mean(logit_std)
  assert 0.7 < ratio < 1.3, (ratio, logit_std, bias_std)


def test_registry_declares_the_coupling_of_the_pairs():
  c = {p: encodings.get(p).coupling for p in encodings.names()}
  assert c["rope"] == c["alibi_multiplicative"] == c["p_rope"] == "multiplicative"
  assert c["alibi"] == c["rope_additive"] == c["relative"] == "additive"
  assert c["nope"] == c["sinusoidal"] == ""
  # causal (a language model): the factor's lower triangle rho^(i-j), j <= i,
  # written from the definition; the model's causal logits of this PE keep it
  causal = ModelConfig(pe="alibi_multiplicative", causal=True, num_heads=4, d_model=64)
  rho = np.exp(-np.asarray(encodings.get("alibi").slopes(causal), np.float64))
  f = np.asarray(encodings.get(causal.pe).logit_factor(causal, {}, 7), np.float64)
  i, j = np.tril_indices(7)
  np.testing.assert_allclose(f[:, i, j], rho[:, None] ** (i - j)[None], rtol=1e-5)
  cfg = ModelConfig(pe="alibi_multiplicative", pe_options={"slopes": "paper"}, num_heads=4,
                    d_model=64)
  np.testing.assert_allclose(encodings.get(cfg.pe).rhos(cfg),
                             np.exp(-np.exp(-np.arange(4) / 4)), rtol=1e-6)

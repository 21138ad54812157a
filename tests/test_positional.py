import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.pe import positional as P


def _rope_oracle(x, positions, base=10000.0):
  """Explicit float64 block-rotation matrices."""
  x = np.asarray(x, np.float64)
  d = x.shape[-1]
  out = np.empty_like(x)
  for idx in np.ndindex(x.shape[:-1]):
    p = float(np.broadcast_to(positions, x.shape[:-1])[idx])
    r = np.zeros((d, d))
    for i in range(d // 2):
      a = p * base ** (-2.0 * i / d)
      r[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[math.cos(a), -math.sin(a)],
                                            [math.sin(a), math.cos(a)]]
    out[idx] = r @ x[idx]
  return out


def test_rope_matches_rotation_matrix_oracle():
  x = jax.random.normal(jax.random.key(0), (2, 9, 3, 8))
  pos = jnp.arange(9)[:, None] * 3 + 1
  got = P.apply_rope(x, pos)
  assert got.shape == x.shape and got.dtype == x.dtype
  np.testing.assert_allclose(got, _rope_oracle(x, np.asarray(pos)), atol=2e-5)


def test_rope_preserves_norms_and_dtype():
  x = jax.random.normal(jax.random.key(1), (7, 16))
  y = P.apply_rope(x, jnp.arange(7) * 11)
  np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1),
                             jnp.linalg.norm(x, axis=-1), rtol=1e-5)
  assert P.apply_rope(x.astype(jnp.bfloat16), jnp.arange(7)).dtype == jnp.bfloat16


def test_rope_scores_depend_only_on_offset():
  kq, kk = jax.random.split(jax.random.key(2))
  q = jax.random.normal(kq, (12, 16))
  k = jax.random.normal(kk, (12, 16))
  pos = jnp.arange(12)

  def logits(shift):
    return P.apply_rope(q, pos + shift) @ P.apply_rope(k, pos + shift).T

  base = logits(0)
  np.testing.assert_allclose(logits(37), base, atol=1e-4)
  np.testing.assert_allclose(logits(500), base, atol=2e-4)
  # ...and RoPE actually does something: not the unrotated logits.
  assert float(jnp.abs(base - q @ k.T).max()) > 0.1


def test_rope_odd_head_dim_rejected():
  with pytest.raises(ValueError, match="even"):
    P.apply_rope(jnp.ones((3, 5)), jnp.arange(3))


def test_sinusoidal_table_layout():
  t = np.asarray(P.sinusoidal_table(10, 8))
  for p in range(10):
    for i in range(4):
      w = 10000.0 ** (-2 * i / 8)
      assert t[p, 2 * i] == pytest.approx(math.sin(p * w), abs=1e-6)
      assert t[p, 2 * i + 1] == pytest.approx(math.cos(p * w), abs=1e-6)


def test_alibi_slopes_standard():
  np.testing.assert_allclose(P.alibi_slopes(8), [2 ** -(i + 1) for i in range(8)],
                             rtol=1e-6)
  # Non-power-of-two: 4 slopes of H=4 then every other slope of H=8.
  s4 = [2 ** (-8 * (i + 1) / 4) for i in range(4)]
  s8 = [2 ** (-8 * (i + 1) / 8) for i in range(8)]
  np.testing.assert_allclose(P.alibi_slopes(6), s4 + s8[0::2][:2], rtol=1e-6)
  np.testing.assert_allclose(P.alibi_slopes_paper(4), np.exp(-np.arange(4) / 4),
                             rtol=1e-6)


def _is_toeplitz(m):
  m = np.asarray(m)
  return all(np.allclose(np.diagonal(m, k), np.diagonal(m, k)[0])
             for k in range(-m.shape[0] + 1, m.shape[1]))


def test_alibi_bias_values_toeplitz_and_causal():
  slopes = P.alibi_slopes(4)
  b = np.asarray(P.alibi_bias(7, slopes))
  i, j = np.meshgrid(np.arange(7), np.arange(7), indexing="ij")
  for h in range(4):
    np.testing.assert_allclose(b[h], -float(slopes[h]) * np.abs(i - j), rtol=1e-6)
    assert _is_toeplitz(b[h])
  bc = np.asarray(P.alibi_bias(7, slopes, causal=True))
  np.testing.assert_array_equal(bc[:, j <= i], b[:, j <= i])
  np.testing.assert_array_equal(bc[:, j > i], 0.0)


def _t5_bucket_oracle(rel, num_buckets, max_distance, bidirectional=True):
  """Scalar port of T5's reference bucketing."""
  ret = 0
  n = -rel
  if bidirectional:
    num_buckets //= 2
    if n < 0:
      ret += num_buckets
    n = abs(n)
  else:
    n = max(n, 0)
  max_exact = num_buckets // 2
  if n < max_exact:
    return ret + n
  val = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                        * (num_buckets - max_exact))
  return ret + min(val, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_match_reference(bidirectional):
  rel = np.arange(-600, 601)
  got = np.asarray(P.relative_position_bucket(
      jnp.asarray(rel), num_buckets=32, max_distance=128,
      bidirectional=bidirectional))
  want = [_t5_bucket_oracle(int(r), 32, 128, bidirectional) for r in rel]
  np.testing.assert_array_equal(got, want)


def test_t5_bucket_hand_table():
  # num_buckets=8 bidirectional: 4 per sign, 2 exact, then log-spaced to 16.
  rel = jnp.asarray([0, -1, -2, -3, -4, -8, -16, -100, 1, 2, 5, 100])
  got = P.relative_position_bucket(rel, num_buckets=8, max_distance=16)
  np.testing.assert_array_equal(got, [0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 6, 7])


def test_relative_bias_is_toeplitz():
  table = jax.random.normal(jax.random.key(0), (2 * 5 + 1, 3))
  b = P.relative_bias_from_table(table, 9, max_distance=5)
  assert b.shape == (3, 9, 9)
  for h in range(3):
    assert _is_toeplitz(b[h])
    # entry (i, j) uses offset j - i clipped to [-5, 5]
    assert float(b[h, 0, 8]) == float(table[5 + 5, h])
    assert float(b[h, 4, 2]) == float(table[-2 + 5, h])
  bt = P.relative_bias_from_table(jax.random.normal(jax.random.key(1), (8, 2)), 20,
                                  max_distance=16, num_buckets=8)
  for h in range(2):
    assert _is_toeplitz(bt[h])


def test_registry_and_unknown_name():
  from pe_spectral.pe import encodings
  assert set(encodings.names()) == {
      "nope", "sinusoidal", "learned", "relative", "alibi", "rope", "partial_rope",
      "rope_sinusoidal", "mla", "kerple_log", "kerple_power", "p_rope", "fire", "xpos",
      "cope", "rope_additive", "alibi_multiplicative", "pope", "rope_learned", "alibi_data",
      "carope", "comrope", "dape", "path", "stickbreaking"}
  assert encodings.get("cope").kinds == ("contextual",)
  assert encodings.get("rope_sinusoidal").kinds == ("input", "rotary")
  assert encodings.get("alibi").kinds == ("bias",)
  assert encodings.get("fire").kinds == ("bias",)
  assert encodings.get("nope").kinds == ()
  with pytest.raises(ValueError, match="valid names: nope"):
    encodings.get("rotary")


def test_pe_functions_jit_and_vmap():
  x = jax.random.normal(jax.random.key(3), (4, 6, 8))
  pos = jnp.arange(6)
  np.testing.assert_allclose(jax.jit(P.apply_rope)(x, pos), P.apply_rope(x, pos),
                             atol=1e-6)
  per = jax.vmap(lambda xi: P.apply_rope(xi, pos))(x)
  np.testing.assert_allclose(per, P.apply_rope(x, pos), atol=1e-6)
  slopes = jnp.asarray([0.5, 0.25])
  batched = jax.vmap(lambda s: P.alibi_bias(5, s))(slopes)
  np.testing.assert_allclose(batched, P.alibi_bias(5, slopes), atol=0)


@pytest.mark.parametrize("kind", ["log", "power"])
def test_kerple_bias_closed_form_and_symbol_bounds(kind):
  """KERPLE (Chi et al. 2022) against a float64 loop of its definition, and
  its Toeplitz coefficients enclose the dense bias's eigenvalues through
  toeplitz_eig_bounds."""
  from pe_spectral.pe import spectral as S
  r1, r2 = np.array([0.5, 2.0, 1.3]), np.array([0.3, 1.7, 1.0])
  n = 9
  got = np.asarray(P.kerple_bias(n, r1, r2, kind=kind))
  want = np.zeros((3, n, n))
  for h in range(3):
    for i in range(n):
      for j in range(n):
        d = abs(i - j)
        want[h, i, j] = (-r1[h] * math.log(1 + r2[h] * d) if kind == "log"
                         else -r1[h] * d ** r2[h])
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  lo, hi = S.toeplitz_eig_bounds(P.kerple_coeffs(n, r1, r2, kind=kind))
  e = np.linalg.eigvalsh(want)
  assert (np.asarray(lo) <= e[:, 0] + 1e-5).all() and (e[:, -1] <= np.asarray(hi) + 1e-5).all()
  # the parametrisation keeps r1 > 0 and the power's 0 < r2 <= 2, with gradients
  a, b = P.kerple_params(jnp.asarray([-30.0, 0.0, 30.0]), jnp.asarray([-30.0, 0.0, 30.0]),
                         kind=kind)
  assert (np.asarray(a) > 0).all() and (np.asarray(b) > 0).all()
  if kind == "power":
    assert (np.asarray(b) <= 2.0).all()
  g = jax.grad(lambda x: P.kerple_bias(5, x, jnp.full(3, 1.5), kind=kind).sum())(
      jnp.ones(3))
  assert np.isfinite(np.asarray(g)).all()


def test_p_rope_frequencies_and_rotation():
  """p-RoPE (Barbero et al. 2024): the highest round(p d/2) frequencies
  rotate, the rest are 0; pairs with frequency 0 are left exactly as they are."""
  d = 16
  want = [10000.0 ** (-2 * i / d) if i < 6 else 0.0 for i in range(8)]  # p = 0.75
  np.testing.assert_allclose(P.p_rope_frequencies(d, 0.75), want, rtol=1e-12)
  np.testing.assert_array_equal(P.p_rope_frequencies(d, 0.0), np.zeros(8))
  np.testing.assert_allclose(P.p_rope_frequencies(d, 1.0),
                             10000.0 ** (-2 * np.arange(8) / d), rtol=1e-12)
  with pytest.raises(ValueError):
    P.p_rope_frequencies(d, 1.5)
  x = jax.random.normal(jax.random.key(0), (10, d))
  pos = np.arange(10)
  out = np.asarray(P.apply_rope(x, pos, fraction=0.75))
  np.testing.assert_array_equal(out[:, 12:], np.asarray(x)[:, 12:])  # unrotated pairs
  np.testing.assert_allclose(out[:, :12], np.asarray(P.apply_rope(x, pos))[:, :12],
                             atol=1e-6)


def test_one_rotation_serves_the_model_the_spectral_module_and_both_layouts():
  """positional.rotate is the one RoPE rotation: apply_rope and
  spectral.rope_rotate equal it exactly, and each layout matches a float64
  loop over 2x2 rotation matrices written from the definition."""
  from pe_spectral.pe import spectral as S
  rng = np.random.default_rng(0)
  n, d = 7, 8
  x = rng.normal(size=(n, d)).astype(np.float32)
  theta = 10000.0 ** (-np.arange(d // 2) * 2.0 / d)
  pos = np.arange(n, dtype=np.float64)
  angles = pos[:, None] * theta
  for pairing, pairs in (("interleaved", [(2 * j, 2 * j + 1) for j in range(d // 2)]),
                         ("half", [(j, j + d // 2) for j in range(d // 2)])):
    want = np.array(x, np.float64)
    for m in range(n):
      for j, (a, b) in enumerate(pairs):
        c, s = np.cos(angles[m, j]), np.sin(angles[m, j])
        want[m, a], want[m, b] = c * x[m, a] - s * x[m, b], s * x[m, a] + c * x[m, b]
    got = np.asarray(P.rotate(x, angles.astype(np.float32), pairing=pairing))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(
        np.asarray(S.rope_rotate(x, theta.astype(np.float32), pairing=pairing)),
        np.asarray(P.rotate(x, (np.arange(n, dtype=np.float32)[:, None]
                                         * theta.astype(np.float32)), pairing=pairing)))
  for pairing in ("interleaved", "half"):  # the model's RoPE, in either layout
    np.testing.assert_allclose(np.asarray(P.apply_rope(x, np.arange(n), pairing=pairing)),
                               np.asarray(P.rotate(x, angles, pairing=pairing)),
                               rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="pairing"):
    P.rotate(x, angles, pairing="block")
  with pytest.raises(ValueError, match="pairing"):
    P.apply_rope(x, np.arange(n), pairing="block")


@pytest.mark.parametrize("pe", ["rope", "xpos", "partial_rope"])
def test_the_half_layout_is_the_interleaved_one_on_permuted_queries_and_keys(pe):
  """``rope_pairing="half"`` (GPT-NeoX/Llama) against the interleaved layout:
  the same model outputs, layer-0 logits and frequency knock-outs once each
  head's query/key projection columns are permuted ``(j, j + d/2) -> (2j, 2j+1)``
  (the values untouched); and the decomposition's Hadamard form holds for it."""
  from pe_spectral.analysis import decompose
  from pe_spectral.nn.model import apply_model, init_model
  from pe_spectral.nn.model_config import ModelConfig
  base = dict(pe=pe, vocab_size=7, num_classes=3, d_model=16, num_heads=2, num_layers=2,
              d_ff=32, max_len=12, dropout=0.0)
  half = ModelConfig(**base, rope_pairing="half")
  inter = ModelConfig(**base)
  assert half.to_dict()["rope_pairing"] == "half" and inter.pairing == "interleaved"
  graphdef, params = init_model(half, jax.random.key(0))
  d, h = half.head_dim, half.num_heads
  perm = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], -1).reshape(-1)
  cols = np.concatenate([hh * d + perm for hh in range(h)])  # per head
  permuted = jax.tree.map(lambda x: x, params)
  for blk in permuted["blocks"].values():
    for name in ("q_proj", "k_proj"):
      blk["attn"][name]["kernel"] = blk["attn"][name]["kernel"][:, cols]
      blk["attn"][name]["bias"] = blk["attn"][name]["bias"][cols]
  g_inter, _ = init_model(inter, jax.random.key(0))
  ids = jnp.asarray(np.random.default_rng(5).integers(1, 7, (3, 10)))
  out_half = np.asarray(apply_model(graphdef, params, ids))
  out_inter = np.asarray(apply_model(g_inter, permuted, ids))
  np.testing.assert_allclose(out_half, out_inter, rtol=1e-5, atol=1e-5)
  # without the permutation the two layouts are different models
  assert np.abs(np.asarray(apply_model(g_inter, params, ids)) - out_half).max() > 1e-3
  if pe != "xpos":  # a frequency knock-out names the same pair in both layouts
    mask = jnp.ones((2, h, d // 2)).at[0, 0, 1].set(0.0).at[1, 0, 0].set(0.0)
    knocked = np.asarray(apply_model(graphdef, params, ids, freq_mask=mask))
    np.testing.assert_allclose(knocked,
                               np.asarray(apply_model(g_inter, permuted, ids, freq_mask=mask)),
                               rtol=1e-5, atol=1e-5)
    assert np.abs(knocked - out_half).max() > 1e-5  # the knock-out reaches the outputs
  t_half = decompose.layer_terms(graphdef, params, ids, 0)
  t_inter = decompose.layer_terms(g_inter, permuted, ids, 0)
  np.testing.assert_allclose(np.asarray(t_half["logits"]), np.asarray(t_inter["logits"]),
                             rtol=1e-5, atol=1e-5)
  if pe != "xpos":  # a true rotation: the Hadamard form, read in the half layout
    np.testing.assert_allclose(np.asarray(t_half["hadamard"]), np.asarray(t_half["logits"]),
                               rtol=1e-4, atol=1e-4)


def test_rope_pairing_is_refused_in_one_line_where_it_means_nothing():
  from pe_spectral.nn.model_config import ModelConfig
  base = dict(vocab_size=7, num_classes=3, d_model=16, num_heads=2, num_layers=1,
              d_ff=32, max_len=12)
  with pytest.raises(ValueError, match="rope_pairing must be 'interleaved' or 'half'"):
    ModelConfig(pe="rope", rope_pairing="gptj", **base)
  with pytest.raises(ValueError, match=r"rope_pairing applies to rope, .*not 'alibi'"):
    ModelConfig(pe="alibi", rope_pairing="half", **base)
  # recorded only for the PEs that read it, and a record without it is the default
  assert "rope_pairing" not in ModelConfig(pe="alibi", **base).to_dict()
  assert ModelConfig.from_dict(
      {k: v for k, v in ModelConfig(pe="rope", **base).to_dict().items()
       if k != "rope_pairing"}).pairing == "interleaved"

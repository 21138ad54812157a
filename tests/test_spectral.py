"""Spectral module vs float64 NumPy/SciPy oracles (tolerances: docs/spectral.md)."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from pe_spectral.pe import positional
from pe_spectral.pe import spectral as S

EPS = float(np.finfo(np.float32).eps)


def _random_hermitian_coeffs(rng, n, kind, complex_):
  k = np.arange(1, n)
  if kind == "iid":
    decay = np.ones(n - 1)
  elif kind == "power":
    decay = 1.0 / k ** 1.5
  elif kind == "geometric":
    decay = 0.9 ** k
  else:  # banded
    decay = (k < max(2, n // 8)).astype(float)
  pos = rng.standard_normal(n - 1) * decay
  if complex_:
    pos = pos + 1j * rng.standard_normal(n - 1) * decay
  t0 = rng.standard_normal()
  coeffs = np.concatenate([np.conj(pos[::-1]), [t0], pos])
  return coeffs


@pytest.mark.parametrize("n", [8, 64, 512])
@pytest.mark.parametrize("complex_", [False, True])
def test_circulant_enclosure_contains_spectrum(n, complex_):
  rng = np.random.default_rng(n + complex_)
  trials = 6 if n == 512 else 20
  for t in range(trials):
    kind = ("iid", "power", "geometric", "banded")[t % 4]
    c = _random_hermitian_coeffs(rng, n, kind, complex_)
    dense = scipy.linalg.toeplitz(c[n - 1:], c[n - 1::-1])
    eig = np.linalg.eigvalsh(dense)
    for points in (None, 2 * n - 1, 4 * n, (2 * n - 1, 2 * n, 2 * n + 3)):
      lo, hi = S.toeplitz_eig_bounds(jnp.asarray(c, jnp.complex64 if complex_
                                                 else jnp.float32), points)
      assert float(lo) <= eig[0] and eig[-1] <= float(hi), (kind, points)
    glo, ghi = S.toeplitz_gershgorin_bounds(jnp.asarray(c))
    dlo, dhi = S.gershgorin_bounds(jnp.asarray(dense))
    np.testing.assert_allclose([glo, ghi], [dlo, dhi], rtol=1e-5, atol=1e-5)
    assert float(glo) <= eig[0] + 1e-5 and eig[-1] <= float(ghi) + 1e-5


def test_aliased_grid_is_rejected():
  c = jnp.ones(2 * 16 - 1)
  with pytest.raises(ValueError, match="alias"):
    S.toeplitz_eig_bounds(c, 16)
  with pytest.raises(ValueError, match="alias"):
    S.toeplitz_matvec(jnp.ones(16), jnp.ones(16), num_points=30)


def test_toeplitz_constructors_match_scipy():
  rng = np.random.default_rng(0)
  col = rng.standard_normal(7) + 1j * rng.standard_normal(7)
  row = rng.standard_normal(7) + 1j * rng.standard_normal(7)
  np.testing.assert_allclose(S.toeplitz(col, row), scipy.linalg.toeplitz(col, row),
                             rtol=1e-6)
  np.testing.assert_allclose(S.toeplitz(col), scipy.linalg.toeplitz(col), rtol=1e-6)
  coeffs = S.toeplitz_coeffs(col, row)
  assert coeffs.shape == (13,)
  assert complex(coeffs[6 + 2]) == pytest.approx(col[2])   # t_2
  assert complex(coeffs[6 - 3]) == pytest.approx(row[3])   # t_{-3}
  np.testing.assert_allclose(S.toeplitz_from_coeffs(coeffs), S.toeplitz(col, row))


@pytest.mark.parametrize("n", [5, 64, 300])
def test_matvec_matches_dense(n):
  rng = np.random.default_rng(n)
  col = rng.standard_normal(n)
  row = rng.standard_normal(n)
  x = rng.standard_normal((3, n))
  dense = scipy.linalg.toeplitz(col, row)
  got = S.toeplitz_matvec(jnp.asarray(col, jnp.float32), jnp.asarray(x, jnp.float32),
                          jnp.asarray(row, jnp.float32))
  m = 1 << (2 * n - 2).bit_length()
  tol = 4 * EPS * math.log2(m) * np.abs(np.r_[col, row]).sum() * np.abs(x).max()
  np.testing.assert_allclose(got, x @ dense.T, atol=tol)
  assert got.dtype == jnp.float32
  got2 = S.toeplitz_matvec(col, x, row, num_points=2 * n - 1)
  np.testing.assert_allclose(got2, x @ dense.T, atol=tol)


def test_symbol_matches_direct_sum():
  rng = np.random.default_rng(1)
  n = 16
  c = _random_hermitian_coeffs(rng, n, "iid", True)
  f = np.asarray(S.symbol(jnp.asarray(c, jnp.complex64), 40))
  omega = 2 * np.pi * np.arange(40) / 40
  k = np.arange(-(n - 1), n)
  want = (c[None, :] * np.exp(1j * k[None, :] * omega[:, None])).sum(1)
  tol = 4 * EPS * math.log2(40) * np.abs(c).sum()
  np.testing.assert_allclose(f, want, atol=tol)
  assert np.abs(f.imag).max() <= tol


@pytest.mark.parametrize("n", [64, 512])
def test_lanczos_brackets_extremes(n):
  rng = np.random.default_rng(n)
  c = _random_hermitian_coeffs(rng, n, "power", False)
  col = jnp.asarray(c[n - 1:], jnp.float32)
  eig = np.linalg.eigvalsh(scipy.linalg.toeplitz(c[n - 1:]))
  ritz = S.lanczos_ritz(functools.partial(S.toeplitz_matvec, col),
                        jax.random.normal(jax.random.key(0), (n,)), 40)
  norm = np.abs(eig).max()
  assert float(ritz[0]) >= eig[0] - 32 * EPS * norm
  assert float(ritz[-1]) <= eig[-1] + 32 * EPS * norm
  lo, hi = S.toeplitz_eig_bounds(jnp.asarray(c, jnp.float32))
  assert float(lo) <= float(ritz[0]) + 1e-6 and float(ritz[-1]) <= float(hi) + 1e-6
  rng_ = eig[-1] - eig[0]
  assert (eig[-1] - float(ritz[-1])) < 1e-2 * rng_  # converged at the top
  rq, _ = S.power_iteration(functools.partial(S.toeplitz_matvec, col),
                            jnp.ones(n), 50)
  assert eig[0] - 1e-4 * norm <= float(rq) <= eig[-1] + 1e-4 * norm


def test_lanczos_survives_breakdown():
  a = jnp.diag(jnp.asarray([1.0, 2.0, 3.0, 4.0]))
  ritz = S.lanczos_ritz(lambda v: a @ v, jnp.asarray([1.0, 0, 0, 0]), 4)
  assert bool(jnp.isfinite(ritz).all())
  assert float(ritz.min()) >= 1.0 - 1e-5 and float(ritz.max()) <= 4.0 + 1e-5


def _correlation(rng, n, rank, complex_=False):
  x = rng.standard_normal((n, rank)) + (1j * rng.standard_normal((n, rank))
                                        if complex_ else 0)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x @ x.conj().T


@pytest.mark.parametrize("n", [8, 64])
def test_hadamard_bounds_and_majorisation(n):
  rng = np.random.default_rng(n)
  for rank in (1, 2, max(1, n // 8), n):
    for complex_ in (False, True):
      x = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n))
                                         if complex_ else 0)
      a = (x + x.conj().T) / 2 + rng.standard_normal() * np.eye(n)
      c = _correlation(rng, n, rank, complex_)
      scale = rng.uniform(0.5, 2.0, n)
      c_gen = c * np.sqrt(scale[:, None] * scale[None, :])  # PSD, non-unit diagonal
      for cc in (c, c_gen):
        eig = np.linalg.eigvalsh(a * cc)
        lo, hi = S.hadamard_bounds_dense(jnp.asarray(a, jnp.complex64),
                                         jnp.asarray(cc, jnp.complex64))
        tol = 32 * EPS * (abs(float(lo)) + abs(float(hi)))
        assert float(lo) - tol <= eig[0] and eig[-1] <= float(hi) + tol
      gap, trace = S.majorization_gap(np.linalg.eigvalsh(a * c), np.linalg.eigvalsh(a))
      tol = 32 * EPS * np.linalg.norm(a, 2) * n  # float32 partial sums of n terms
      assert float(gap) <= tol and float(trace) <= tol
      ratio = S.hadamard_contraction_ratio(jnp.asarray(a), jnp.asarray(c))
      assert float(ratio) <= 1 + 32 * EPS


def test_weyl_and_spread_bounds():
  rng = np.random.default_rng(3)
  n = 40
  for _ in range(10):
    a = rng.standard_normal((n, n))
    a = a + a.T
    b = rng.standard_normal((n, n))
    b = (b + b.T) * rng.uniform(0.1, 5)
    ea, eb, eab = (np.linalg.eigvalsh(m) for m in (a, b, a + b))
    lo, hi = S.weyl_bounds(ea, eb[0], eb[-1])
    assert (np.asarray(lo) <= eab + 1e-9).all() and (eab <= np.asarray(hi) + 1e-9).all()
    slo, shi = S.spread_bounds(np.ptp(ea), np.ptp(eb))
    assert float(slo) - 1e-9 <= np.ptp(eab) <= float(shi) + 1e-9


def test_single_frequency_rope_preserves_spectrum():
  rng = np.random.default_rng(4)
  n = 64
  x = rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))
  a = (x + x.conj().T) / 2
  g = np.asarray(S.rope_toeplitz(n, 0.37), np.complex128)
  np.testing.assert_allclose(np.abs(g), 1.0, atol=1e-6)
  assert np.linalg.matrix_rank(g, tol=1e-3) == 1
  e1, e2 = np.linalg.eigvalsh(a * g), np.linalg.eigvalsh(a)
  np.testing.assert_allclose(e1, e2, atol=32 * EPS * np.abs(e2).max())
  # entries vs float64
  m = np.arange(n)
  want = np.exp(1j * (m[:, None] - m[None, :]) * 0.37)
  np.testing.assert_allclose(g, want, atol=1e-6 + 2 * EPS * n * 0.37)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_rope_logits_hadamard_form_equals_rotation(pairing):
  rng = np.random.default_rng(5)
  n, d = 48, 16
  q, k = rng.standard_normal((2, n, d))
  theta = S.rope_frequencies(d)
  got = S.rope_logits(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                      theta, pairing)
  # explicit float64 rotation matrices
  perm = np.arange(d) if pairing == "interleaved" else np.stack(
      [np.arange(d // 2), np.arange(d // 2) + d // 2], 1).reshape(-1)
  th = np.asarray(theta, np.float64)

  def rot(x, p):
    out = x.copy()
    xp = x[perm]
    for j in range(d // 2):
      a = p * th[j]
      u, v = xp[2 * j], xp[2 * j + 1]
      out[perm[2 * j]] = u * math.cos(a) - v * math.sin(a)
      out[perm[2 * j + 1]] = u * math.sin(a) + v * math.cos(a)
    return out

  qr = np.stack([rot(q[m], m) for m in range(n)])
  kr = np.stack([rot(k[m], m) for m in range(n)])
  want = qr @ kr.T
  mm = np.arange(n)
  tol = 4 * EPS * (1 + np.abs(mm[:, None] - mm[None, :]) * th.max()) * np.outer(
      np.linalg.norm(q, axis=1), np.linalg.norm(k, axis=1))
  assert (np.abs(np.asarray(got) - want) <= tol + 1e-6).all()
  # one source of truth: equals logits built from positional.apply_rope
  if pairing == "interleaved":
    pos = jnp.arange(n)
    via_model = (positional.apply_rope(jnp.asarray(q, jnp.float32), pos)
                 @ positional.apply_rope(jnp.asarray(k, jnp.float32), pos).T)
    np.testing.assert_allclose(got, via_model, atol=2e-4)
    np.testing.assert_allclose(S.rope_rotate(q, theta), positional.apply_rope(
        jnp.asarray(q, jnp.float32), pos), atol=2e-5)


def test_rope_envelope_holds_and_is_theta_free():
  rng = np.random.default_rng(6)
  n, d = 64, 16
  for _ in range(5):
    q, k = rng.standard_normal((2, n, d))
    neg, pos_, nuc = S.rope_envelope(q, k)
    for theta in (S.rope_frequencies(d), jnp.zeros(d // 2)):
      l = np.asarray(S.rope_logits(q, k, theta), np.float64)
      e = np.linalg.eigvalsh((l + l.T) / 2)
      assert e[e > 0].sum() <= float(pos_) * (1 + 1e-5)
      assert e[e < 0].sum() >= float(neg) * (1 + 1e-5)
      assert np.linalg.svd(l, compute_uv=False).sum() <= float(nuc) * (1 + 1e-5)


@pytest.mark.parametrize("n", [2, 8, 64, 512])
def test_alibi_closed_form_and_inertia(n):
  for slope in (0.0625, 1.0):
    b = np.asarray(S.alibi_toeplitz(n, slope), np.float64)
    np.testing.assert_array_equal(b, np.asarray(positional.alibi_bias(
        n, jnp.asarray([slope]))[0]))
    eig = np.linalg.eigvalsh(b)
    lo, hi = S.alibi_extreme_eigs(n, jnp.float32(slope))
    np.testing.assert_allclose([float(lo), float(hi)], [eig[0], eig[-1]], rtol=1e-5)
    assert (eig < 0).sum() == 1  # exactly one negative eigenvalue
    if n == 512:  # asymptotic constants
      assert float(lo) / (slope * n * n) == pytest.approx(-0.3474083, rel=2e-3)
      assert float(hi) / (slope * n * n) == pytest.approx(2 / math.pi ** 2, rel=2e-3)


def test_alibi_vmap_over_slopes_equals_loop_and_jit():
  slopes = positional.alibi_slopes(6)
  batched = jax.vmap(lambda m: S.alibi_extreme_eigs(64, m))(slopes)
  jitted = jax.jit(jax.vmap(lambda m: S.alibi_extreme_eigs(64, m)))(slopes)
  for i, m in enumerate(slopes):
    lo, hi = S.alibi_extreme_eigs(64, m)
    assert float(batched[0][i]) == pytest.approx(float(lo), rel=1e-6)
    assert float(batched[1][i]) == pytest.approx(float(hi), rel=1e-6)
  np.testing.assert_allclose(jitted, batched, rtol=1e-6)
  coeffs = jax.vmap(lambda m: S.toeplitz_coeffs(S.alibi_toeplitz(64, m)[:, 0]))(slopes)
  lo, hi = S.toeplitz_eig_bounds(coeffs)
  for i, _m in enumerate(slopes):
    l1, h1 = S.toeplitz_eig_bounds(coeffs[i])
    assert float(lo[i]) == pytest.approx(float(l1)) and float(hi[i]) == pytest.approx(float(h1))
  jl, jh = jax.jit(S.toeplitz_eig_bounds)(coeffs)
  np.testing.assert_allclose(jl, lo, rtol=1e-6)


def test_sinusoidal_gram_equals_ppt():
  for n, d in ((8, 16), (128, 64)):
    p = np.asarray(S.sinusoidal_pe(n, d), np.float64)
    g = np.asarray(S.sinusoidal_gram(n, d))
    np.testing.assert_allclose(g, p @ p.T, atol=4 * EPS * n * d / 2)
    assert np.linalg.eigvalsh(p @ p.T)[0] > -1e-8
    assert float(S.toeplitz_defect(jnp.asarray(p @ p.T))) < 1e-5


def test_t5_coeffs_match_model_bias():
  n = 40
  beta = jax.random.normal(jax.random.key(0), (32,))
  coeffs = S.t5_bias_coeffs(n, beta, max_distance=16)
  dense = positional.relative_bias_from_table(beta[:, None], n, max_distance=16,
                                              num_buckets=32)[0]
  np.testing.assert_allclose(S.toeplitz_from_coeffs(coeffs), dense)


def test_measures_against_numpy():
  rng = np.random.default_rng(7)
  a = rng.standard_normal((12, 9))
  s = np.linalg.svd(a, compute_uv=False)
  assert float(S.stable_rank(a)) == pytest.approx((s ** 2).sum() / s[0] ** 2, rel=1e-5)
  e = np.sort(rng.uniform(0.1, 3, 10))
  assert float(S.condition_number(e)) == pytest.approx(e[-1] / e[0], rel=1e-6)
  assert float(S.spectral_spread(e)) == pytest.approx(e[-1] - e[0], rel=1e-6)
  assert float(S.contraction_ratio(e / 2, e)) == pytest.approx(0.5, rel=1e-6)
  l = rng.standard_normal((10, 10))
  shifted = l + rng.standard_normal((10, 1))  # a row shift: softmax-invariant
  np.testing.assert_allclose(np.linalg.svd(np.asarray(S.row_center(shifted)),
                                           compute_uv=False),
                             np.linalg.svd(np.asarray(S.row_center(l)),
                                           compute_uv=False), atol=1e-5)
  np.testing.assert_allclose(S.symmetric_part(l), (l + l.T) / 2, atol=1e-6)
  t = scipy.linalg.toeplitz(rng.standard_normal(10), rng.standard_normal(10))
  assert float(S.toeplitz_defect(t)) < 1e-6
  assert float(S.toeplitz_defect(l)) > 0.3
  # numerical range support vs brute force over unit vectors' Rayleigh quotients
  supp = S.numerical_range_support(l, jnp.asarray([0.0]))
  assert float(supp[0]) == pytest.approx(np.linalg.eigvalsh((l + l.T) / 2)[-1], rel=1e-5)


def test_toeplitz_eig_bounds_refuses_what_it_cannot_bound():
  c = np.array([0.5, 1.0, 2.0, 1.0, 0.5])
  lo, hi = S.toeplitz_eig_bounds(np.array([1, 2, 3, 2, 1]))  # integers: cast
  e = np.linalg.eigvalsh(np.asarray(S.toeplitz_from_coeffs(np.array([1., 2, 3, 2, 1]))))
  assert lo <= e[0] and e[-1] <= hi
  cases = [
      (np.array([np.nan, 1.0, np.nan]), "NaN or inf"),
      (np.array([0.1, 1.0, 2.0]), "not Hermitian"),
      (np.float32(1.0), "got a scalar"),
      (np.ones(4), "odd length"),
  ]
  for coeffs, msg in cases:
    with pytest.raises(ValueError, match=msg):
      S.toeplitz_eig_bounds(coeffs)
  for points, err in ((0, ValueError), ((), ValueError), ((16, 3), ValueError),
                      (8.0, TypeError)):
    with pytest.raises(err):
      S.toeplitz_eig_bounds(c, points)
  # complex Hermitian coefficients pass; symmetric-but-complex ones, or a
  # complex diagonal, do not
  z = np.array([1 - 2j, 0.5 + 1j, 3.0, 0.5 - 1j, 1 + 2j], np.complex64)
  S.toeplitz_eig_bounds(z)
  for bad in (np.array([1 + 2j, 0.5 - 1j, 3.0, 0.5 - 1j, 1 + 2j], np.complex64),
              np.array([1 - 2j, 0.5 + 1j, 3.0 + 1j, 0.5 - 1j, 1 + 2j], np.complex64)):
    with pytest.raises(ValueError, match="not Hermitian"):
      S.toeplitz_eig_bounds(bad)

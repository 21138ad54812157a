"""The pure kernels with and without jit (``chex.variants``), each against an
independent oracle written here in float64 NumPy."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from pe_spectral.nn.attention import attention
from pe_spectral.pe import positional, spectral


class PureKernelVariants(parameterized.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_attention_against_float64_loop(self):
    b, s, h, d = 2, 5, 3, 4
    ks = jax.random.split(jax.random.key(0), 4)
    q, k, v = (jax.random.normal(kk, (b, s, h, d)) for kk in ks[:3])
    bias = jax.random.normal(ks[3], (h, s, s))
    got = self.variant(lambda q, k, v, bias: attention(q, k, v, bias=bias))(q, k, v, bias)
    qn, kn, vn, bn = (np.asarray(x, np.float64) for x in (q, k, v, bias))
    want = np.zeros((b, s, h, d))
    for bi in range(b):
      for hi in range(h):
        logits = qn[bi, :, hi] @ kn[bi, :, hi].T / np.sqrt(d) + bn[hi]
        p = np.exp(logits - logits.max(1, keepdims=True))
        want[bi, :, hi] = (p / p.sum(1, keepdims=True)) @ vn[bi, :, hi]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

  @chex.variants(with_jit=True, without_jit=True)
  def test_apply_rope_against_rotation_loop(self):
    x = jax.random.normal(jax.random.key(1), (7, 8))
    pos = jnp.arange(7) * 1.0  # traced positions: the jnp path (the model uses NumPy)
    got = self.variant(lambda x, p: positional.apply_rope(x, p, base=100.0))(x, pos)
    xn = np.asarray(x, np.float64)
    want = xn.copy()
    for m in range(7):
      for i in range(4):
        t = m * 100.0 ** (-2 * i / 8)
        a, bb = xn[m, 2 * i], xn[m, 2 * i + 1]
        want[m, 2 * i] = np.cos(t) * a - np.sin(t) * bb
        want[m, 2 * i + 1] = np.sin(t) * a + np.cos(t) * bb
    np.testing.assert_allclose(got, want, atol=1e-5)

  @chex.variants(with_jit=True, without_jit=True)
  def test_alibi_bias_closed_form(self):
    slopes = jnp.asarray([0.5, 0.25])
    got = self.variant(lambda s: positional.alibi_bias(6, s))(slopes)
    want = np.array([[[-m * abs(i - j) for j in range(6)] for i in range(6)]
                     for m in (0.5, 0.25)])
    np.testing.assert_allclose(got, want)

  @chex.variants(with_jit=True, without_jit=True)
  def test_toeplitz_eig_bounds_enclose_eigvalsh(self):
    rng = np.random.default_rng(0)
    t = rng.normal(size=9)
    coeffs = np.concatenate([t[:0:-1], t])  # symmetric: t_{-k} = t_k
    lo, hi = self.variant(spectral.toeplitz_eig_bounds)(jnp.asarray(coeffs, jnp.float32))
    dense = np.array([[t[abs(i - j)] for j in range(9)] for i in range(9)])
    e = np.linalg.eigvalsh(dense)
    assert float(lo) <= e[0] and e[-1] <= float(hi)

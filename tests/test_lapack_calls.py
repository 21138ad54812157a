"""At most one LAPACK call per compiled program in the analysis paths.

jaxlib 0.10's batched LAPACK kernels split their batch over XLA:CPU's thread
pool from inside a pool thread and wait for it: two of them side by side in
one program deadlocked `experiments.decompose` on this 2-core machine (every
thread idle, for ever; docstring of `decompose.summarize`). These tests count
the LAPACK custom calls in each compiled program, so a second call added
later fails here instead of hanging CI now and then."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pe_spectral.analysis import curvature as C
from pe_spectral.analysis import decompose as D
from pe_spectral.nn.model import ModelConfig, init_model
from pe_spectral.pe import spectral as S
from pe_spectral.training.config import MODEL_PRESETS


def lapack_calls(fn, *args) -> list:
  """The LAPACK custom calls in ``jit(fn)``'s compiled program for ``args``
  (compiled, not lowered: the lowering outlines a decomposition into a
  function called once per use, so its text names a shared call once)."""
  hlo = jax.jit(fn).lower(*args).compile().as_text()
  return re.findall(r'custom_call_target="(lapack_\w+)"', hlo)


def test_the_counter_sees_two_calls():
  """The oracle: a program with eigvalsh beside svd holds two calls."""
  x = jnp.ones((3, 4, 4))
  calls = lapack_calls(lambda a: (jnp.linalg.eigvalsh(a),
                                  jnp.linalg.svd(a, compute_uv=False)), x)
  if not calls:
    pytest.skip(f"no LAPACK custom calls on the {jax.default_backend()} backend")
  assert len(calls) == 2


@pytest.mark.parametrize("pe", ["rope", "alibi"])
def test_decompose_layer_program_has_one_lapack_call(pe):
  cfg = ModelConfig(pe=pe, **dict(MODEL_PRESETS["smoke"], vocab_size=23, num_classes=5,
                                  dropout=0.0))
  graphdef, params = init_model(cfg, jax.random.key(0))
  stacked = jax.tree.map(lambda x: jnp.stack([x, x]), params)
  ids = jax.random.randint(jax.random.key(1), (2, 10), 1, 23)
  fn = lambda p, i: jax.vmap(lambda q: D._layer_summary(graphdef, q, i, 0))(p)
  calls = lapack_calls(fn, stacked, ids)
  if jax.default_backend() == "cpu":
    assert len(calls) == 1, calls


def test_curvature_summary_has_one_lapack_call():
  """Both Lanczos tridiagonals (Hessian and Adam-preconditioned) share one eigvalsh,
  and the result is that of the two separate public functions."""
  target = jnp.asarray([1.0, -2.0, 3.0, 0.5])
  h = jnp.diag(jnp.asarray([4.0, 1.0, 0.25, 2.0]))
  loss = lambda p: 0.5 * (p["w"] - target) @ h @ (p["w"] - target)
  params = {"w": jnp.zeros(4)}
  opt = optax.adam(1e-2)
  state = opt.init(params)
  _, state = opt.update(jax.grad(loss)(params), state, params)
  kw = dict(b1=0.9, b2=0.999, eps=1e-8, num_iters=4, trace_samples=0)
  key = jax.random.key(3)
  f = lambda p, o: C.curvature_summary(loss, p, o, key=key, **kw)
  calls = lapack_calls(f, params, state)
  if jax.default_backend() == "cpu":
    assert len(calls) == 1, calls
  out = jax.jit(f)(params, state)
  k1, _, k3 = jax.random.split(key, 3)
  np.testing.assert_allclose(out["top_eigs"], C.top_hessian_eigs(loss, params, k=1,
                                                                 num_iters=4, key=k1),
                             rtol=1e-5)
  np.testing.assert_allclose(out["top_eigs"], [4.0], rtol=1e-4)  # exact: num_iters = P
  p = C.adam_preconditioner(state, b1=0.9, b2=0.999, eps=1e-8)
  np.testing.assert_allclose(out["precond_sharpness"],
                             C.preconditioned_sharpness(loss, params, p, num_iters=4,
                                                        key=k3), rtol=1e-5)


def test_hadamard_contraction_ratio_has_one_lapack_call():
  rng = np.random.default_rng(0)
  g = rng.standard_normal((6, 6))
  a = (g + g.T) / 2
  theta = 0.3
  m = np.arange(6)
  c = np.exp(1j * theta * (m[:, None] - m[None, :]))
  calls = lapack_calls(S.hadamard_contraction_ratio, jnp.asarray(a, jnp.float32),
                       jnp.asarray(c, jnp.complex64))
  if jax.default_backend() == "cpu":
    assert len(calls) == 1, calls
  want = np.ptp(np.linalg.eigvalsh(a * c)) / np.ptp(np.linalg.eigvalsh(a))
  got = S.hadamard_contraction_ratio(jnp.asarray(a, jnp.float32),
                                     jnp.asarray(c, jnp.complex64))
  assert float(got) == pytest.approx(want, rel=1e-4)

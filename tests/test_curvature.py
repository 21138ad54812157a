"""Curvature estimates against the dense Hessian: a quadratic with a known
spectrum and a tiny Transformer (jax.hessian, float64)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import assert_fast_matches_reference
from jax.flatten_util import ravel_pytree

from pe_spectral.analysis import curvature as C
from pe_spectral.data.tasks import TaskConfig
from pe_spectral.nn.model import ModelConfig
from pe_spectral.runtime import speed
from pe_spectral.training import recorders
from pe_spectral.training.train import TrainConfig, jit_chunk, jit_init, make_steps, seed_keys


def _quadratic(eigs, seed=0):
  n = len(eigs)
  q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))
  a = (q * np.asarray(eigs)) @ q.T
  params = {"w": jnp.zeros((n - 5,)), "b": jnp.zeros((5,))}
  shift = np.random.default_rng(seed + 1).normal(size=n)

  def loss(p):
    x = jnp.concatenate([p["w"], p["b"]]) + shift
    return 0.5 * x @ jnp.asarray(a, x.dtype) @ x

  return loss, params, a


def test_lanczos_top_eigs_of_a_known_spectrum():
  eigs = np.linspace(-3.0, 7.0, 40)
  loss, params, _ = _quadratic(eigs)
  got = C.top_hessian_eigs(loss, params, k=3, num_iters=40, key=jax.random.key(0))
  np.testing.assert_allclose(got, eigs[::-1][:3], rtol=1e-4)
  # fewer steps: Ritz values are inner bounds (interlacing), the top one close
  few = C.top_hessian_eigs(loss, params, k=2, num_iters=15, key=jax.random.key(0))
  assert np.all(np.asarray(few) <= eigs[::-1][:2] + 1e-4)
  assert float(few[0]) > 0.9 * eigs[-1]


def test_lanczos_restarts_when_the_krylov_space_is_exhausted():
  eigs = np.zeros(30)
  eigs[:3] = [3.0, 2.0, 1.0]
  loss, params, _ = _quadratic(eigs)
  got = C.top_hessian_eigs(loss, params, k=5, num_iters=12, key=jax.random.key(1))
  np.testing.assert_allclose(got, [3.0, 2.0, 1.0, 0.0, 0.0], atol=1e-4)


def test_hutchinson_is_unbiased_within_its_standard_error():
  eigs = np.linspace(0.5, 2.0, 30)
  loss, params, a = _quadratic(eigs, seed=3)
  est, se = C.hutchinson_trace(loss, params, num_samples=400, key=jax.random.key(2))
  assert abs(float(est) - np.trace(a)) < 4 * float(se)
  assert float(se) < 0.1 * np.trace(a)


def test_preconditioned_sharpness_equals_the_dense_generalised_eigenvalue():
  eigs = np.linspace(-1.0, 4.0, 25)
  loss, params, a = _quadratic(eigs, seed=5)
  d = np.random.default_rng(7).uniform(0.2, 3.0, size=25)
  pre = {"w": jnp.asarray(d[:20], jnp.float32), "b": jnp.asarray(d[20:], jnp.float32)}
  got = C.preconditioned_sharpness(loss, params, pre, num_iters=25, key=jax.random.key(0))
  want = np.max(np.linalg.eigvals(np.diag(1 / d) @ a).real)
  np.testing.assert_allclose(got, want, rtol=1e-4)


TINY = dict(vocab_size=7, num_classes=3, d_model=4, num_heads=2, num_layers=1, d_ff=4,
            max_len=6, dropout=0.0)


@pytest.mark.parametrize("pe", ["rope", "alibi_multiplicative", "rope_additive"])
def test_tiny_transformer_against_the_dense_float64_hessian(pe):
  """Top eigenvalues, trace and Adam-preconditioned sharpness of a real
  model's loss (reference path, float32) against ``jax.hessian`` in float64."""
  from pe_spectral.nn.model import apply_model, init_model
  cfg = ModelConfig(pe=pe, **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (8, 6), 1, 7)
  labels = jax.random.randint(jax.random.key(2), (8,), 0, 3)

  def loss(p):
    logits = apply_model(graphdef, p, ids)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  tx = optax.adam(1e-2)
  opt = tx.init(params)
  with speed.reference():
    grad = jax.jit(jax.grad(loss))  # traced (on the reference path) once
  for _ in range(3):  # a few steps: a non-trivial second moment
    with speed.reference():
      g = grad(params)
    upd, opt = tx.update(g, opt)
    params = optax.apply_updates(params, upd)
  flat, unravel = ravel_pytree(params)
  dim = flat.shape[0]
  with jax.enable_x64(True), speed.reference():
    f64 = jax.tree.map(lambda x: x.astype(jnp.float64), params)
    flat64, unravel64 = ravel_pytree(f64)
    dense = np.asarray(jax.jit(jax.hessian(lambda v: loss(unravel64(v))))(flat64))
  dense = (dense + dense.T) / 2
  eig = np.linalg.eigvalsh(dense)
  with speed.reference():
    top = jax.jit(lambda q: C.top_hessian_eigs(loss, q, k=2, num_iters=dim,
                                               key=jax.random.key(3)))(params)
    tr, se = jax.jit(lambda q: C.hutchinson_trace(loss, q, num_samples=128,
                                                  key=jax.random.key(4)))(params)
    p = C.adam_preconditioner(opt, b1=0.9, b2=0.999, eps=1e-8)
    sharp = jax.jit(lambda q, pc: C.preconditioned_sharpness(
        loss, q, pc, num_iters=dim, key=jax.random.key(5)))(params, p)
  scale = np.abs(eig).max()
  np.testing.assert_allclose(top, eig[::-1][:2], atol=2e-3 * scale)
  assert abs(float(tr) - eig.sum()) < 4 * float(se) + 1e-3 * scale
  pd = np.asarray(ravel_pytree(p)[0], np.float64)
  want = np.max(np.linalg.eigvalsh(dense / np.sqrt(pd)[:, None] / np.sqrt(pd)[None, :]))
  np.testing.assert_allclose(sharp, want, rtol=5e-3)
  # Adam's P by hand: (1 - b1^t)(sqrt(nu / (1 - b2^t)) + eps), t = 3
  nu = ravel_pytree(opt[0].nu)[0]
  np.testing.assert_allclose(pd, (1 - 0.9 ** 3) * (np.sqrt(nu / (1 - 0.999 ** 3)) + 1e-8),
                             rtol=1e-5)


def test_the_fast_path_is_the_same_model_and_its_hvp_matches_the_reference():
  from pe_spectral.nn.model import apply_model, init_model
  cfg = ModelConfig(pe="rope", **TINY)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (4, 6), 1, 7)
  loss = lambda p: (apply_model(graphdef, p, ids) ** 2).mean()
  assert_fast_matches_reference(loss, params, rtol=1e-6, atol=1e-6)
  with pytest.raises(TypeError):  # custom_vjp: no plain jvp on the fast path
    jax.jvp(loss, (params,), (params,))
  # forward-over-reverse does pass (JAX differentiates the VJP rules): the same HVP
  h_fast = C.hvp(loss, params, params)
  with speed.reference():
    h_ref = C.hvp(loss, params, params)
  for a, b in zip(jax.tree.leaves(h_fast), jax.tree.leaves(h_ref)):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


def test_argument_errors():
  loss, params, _ = _quadratic(np.ones(10))
  for bad in (dict(k=0), dict(k=2.0), dict(k=3, num_iters=2)):
    with pytest.raises(ValueError):
      C.top_hessian_eigs(loss, params, key=jax.random.key(0), **bad)
  with pytest.raises(ValueError, match="num_samples"):
    C.hutchinson_trace(loss, params, num_samples=0, key=jax.random.key(0))
  with pytest.raises(ValueError, match="exceeds"):
    C.top_hessian_eigs(loss, params, k=11, num_iters=11, key=jax.random.key(0))
  with pytest.raises(ValueError, match="Adam state"):
    C.adam_preconditioner(optax.sgd(0.1).init(params), b1=0.9, b2=0.99, eps=1e-8)


def test_recorded_curvature_is_one_vmapped_call_equal_to_each_seed_alone():
  model = ModelConfig(pe="alibi_multiplicative", **{**TINY, "max_len": 8})
  task = TaskConfig(name="distance", vocab_size=7, num_examples=64, seq_len=8, max_len=8,
                    side_min=1, side_max=2, mid_min=1, mid_max=3)
  model = model.replace(num_classes=task.num_labels)
  tr = make_steps(model, task, TrainConfig(learning_rate=1e-2, b1=0.9, b2=0.98, batch_size=8,
                                           epochs=1), 48)
  from pe_spectral.data import tasks
  data = tasks.generate(task)
  keys = seed_keys([0, 1])
  states, _ = jit_chunk(tr)(jit_init(tr)(keys), keys, data.train_ids, data.train_labels,
                            num_steps=3)
  ids, labels = data.train_ids[:16], data.train_labels[:16]
  rec = recorders._curvature_record(tr, states, ids, labels, 3)
  assert set(rec) == {"step", "top_eigs", "precond_sharpness", "grad_norm"}
  tc = tr.train_cfg
  loss = lambda q: tr.loss(q, ids, labels)[0]
  with speed.reference():  # one seed at a time, not vmapped: the oracle
    one_seed = jax.jit(lambda q, o: C.curvature_summary(
        loss, q, o, b1=tc.b1, b2=tc.b2, eps=tc.eps, key=jax.random.key(0xC0DE),
        num_iters=recorders.CURVATURE_ITERS, trace_samples=0))
  for s in range(2):
    p = jax.tree.map(lambda x: x[s], states["params"])
    o = jax.tree.map(lambda x: x[s], states["opt_state"])
    with speed.reference():
      want = one_seed(p, o)
    g = ravel_pytree(jax.grad(loss)(p))[0]
    np.testing.assert_allclose(rec["grad_norm"][s], np.linalg.norm(np.asarray(g, np.float64)),
                               rtol=1e-5)
    np.testing.assert_allclose(rec["top_eigs"][s], want["top_eigs"], rtol=1e-4)
    np.testing.assert_allclose(rec["precond_sharpness"][s], want["precond_sharpness"],
                               rtol=1e-4)
    np.testing.assert_allclose(rec["grad_norm"][s], want["grad_norm"], rtol=1e-5)

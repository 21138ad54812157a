import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.nn.attention import attention


def _ref(q, k, v, bias=None, mask=None, head_mask=None):
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  b, s, h, d = q.shape
  out = np.zeros((b, s, h, v.shape[-1]))
  for bi in range(b):
    for hi in range(h):
      logits = q[bi, :, hi] @ k[bi, :, hi].T / np.sqrt(d)
      if bias is not None:
        logits = logits + np.broadcast_to(bias, (b, h, s, k.shape[1]))[bi, hi]
      if mask is not None:
        logits = np.where(np.broadcast_to(mask, (b, h, s, k.shape[1]))[bi, hi],
                          logits, -np.inf)
      p = np.exp(logits - logits.max(-1, keepdims=True))
      p /= p.sum(-1, keepdims=True)
      out[bi, :, hi] = p @ v[bi, :, hi]
      if head_mask is not None:
        out[bi, :, hi] *= head_mask[hi]
  return out


def _inputs(seed=0, b=2, s=6, h=3, d=4):
  ks = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(ks[0], (b, s, h, d))
  k = jax.random.normal(ks[1], (b, s, h, d))
  v = jax.random.normal(ks[2], (b, s, h, d + 1))
  bias = jax.random.normal(ks[3], (1, h, s, s))
  mask = jnp.arange(s)[None, None, None, :] < jnp.asarray([4, 6])[:, None, None, None]
  return q, k, v, bias, mask


def test_attention_matches_float64_reference():
  q, k, v, bias, mask = _inputs()
  hm = jnp.asarray([1.0, 0.5, 1.0])
  got = attention(q, k, v, bias=bias, mask=mask, head_mask=hm)
  np.testing.assert_allclose(got, _ref(q, k, v, bias, mask, np.asarray(hm)),
                             atol=1e-5)
  np.testing.assert_allclose(attention(q, k, v), _ref(q, k, v), atol=1e-5)


def test_head_mask_zero_removes_exactly_one_head():
  q, k, v, bias, mask = _inputs(1)
  full = attention(q, k, v, bias=bias, mask=mask)
  abl = attention(q, k, v, bias=bias, mask=mask, head_mask=jnp.asarray([1., 0., 1.]))
  np.testing.assert_array_equal(abl[:, :, 1], 0.0)
  np.testing.assert_array_equal(abl[:, :, 0], full[:, :, 0])
  np.testing.assert_array_equal(abl[:, :, 2], full[:, :, 2])


def test_per_head_vmap_equals_batched():
  q, k, v, bias, mask = _inputs(2)
  bias_b = jnp.broadcast_to(bias, (2, 3, 6, 6))
  mask_b = jnp.broadcast_to(mask, (2, 3, 6, 6))

  def one_head(qh, kh, vh, bh, mh):  # qh: [b, s, d] -> lifted over heads
    return attention(qh[:, :, None], kh[:, :, None], vh[:, :, None],
                     bias=bh[:, None], mask=mh[:, None])[:, :, 0]

  per_head = jax.vmap(one_head, in_axes=(2, 2, 2, 1, 1), out_axes=2)(
      q, k, v, bias_b, mask_b)
  np.testing.assert_allclose(per_head, attention(q, k, v, bias=bias, mask=mask),
                             atol=1e-6)


def test_jit_equals_nojit():
  q, k, v, bias, mask = _inputs(3)
  f = lambda *a: attention(*a, bias=bias, mask=mask)
  np.testing.assert_allclose(jax.jit(f)(q, k, v), f(q, k, v), atol=1e-6)


def test_dropout_is_keyed_and_off_without_key():
  q, k, v, _, _ = _inputs(4)
  a = attention(q, k, v, dropout_rate=0.5, dropout_key=jax.random.key(0))
  b = attention(q, k, v, dropout_rate=0.5, dropout_key=jax.random.key(0))
  np.testing.assert_array_equal(a, b)
  assert float(jnp.abs(a - attention(q, k, v)).max()) > 1e-3
  np.testing.assert_array_equal(attention(q, k, v, dropout_rate=0.5),
                                attention(q, k, v))


def _autodiff_attention(q, k, v, bias, mask, rate, key):
  """Plain softmax attention differentiated by JAX itself (the VJP oracle)."""
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
  if bias is not None:
    logits = logits + bias
  if mask is not None:
    logits = jnp.where(mask, logits, -1e30)
  p = jax.nn.softmax(logits, axis=-1)
  if rate:
    p = jnp.where(jax.random.bernoulli(key, 1.0 - rate, p.shape), p / (1.0 - rate), 0.0)
  return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def test_hand_written_vjp_matches_autodiff():
  """Gradients w.r.t. q, k, v and a broadcast bias, with a padding mask, a fully
  masked query row and dropout, against autodiff of the plain formula."""
  q, k, v, _, mask = _inputs(b=2, s=7, h=3, d=4)
  bias = jax.random.normal(jax.random.key(5), (3, 7, 7))  # [heads, q, k]: summed over batch
  mask = mask & (jnp.arange(7) != 2)[None, None, :, None]  # query 2 sees nothing
  w = jax.random.normal(jax.random.key(6), v.shape)
  key = jax.random.key(7)
  for rate, kk in ((0.0, None), (0.3, key)):
    ours = lambda q, k, v, b: jnp.sum(w * attention(q, k, v, bias=b, mask=mask,
                                                     dropout_rate=rate, dropout_key=kk))
    ref = lambda q, k, v, b: jnp.sum(w * _autodiff_attention(q, k, v, b, mask, rate, kk))
    np.testing.assert_allclose(ours(q, k, v, bias), ref(q, k, v, bias), rtol=1e-5)
    g_ours = jax.jit(jax.grad(ours, argnums=(0, 1, 2, 3)))(q, k, v, bias)
    g_ref = jax.grad(ref, argnums=(0, 1, 2, 3))(q, k, v, bias)
    for a, b in zip(g_ours, g_ref):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # and under vmap over a leading (seed) axis of q
    qs = jnp.stack([q, 2 * q])
    g_vm = jax.vmap(jax.grad(ours), in_axes=(0, None, None, None))(qs, k, v, bias)
    np.testing.assert_allclose(g_vm[1], jax.grad(ref)(2 * q, k, v, bias), rtol=1e-4,
                               atol=1e-5)


def test_linear_bias_gradient_matches_nnx_linear():
  from flax import nnx

  from pe_spectral.nn.linear import Linear, add_bias
  ours = Linear(5, 3, rngs=nnx.Rngs(0))
  ref = nnx.Linear(5, 3, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (4, 6, 5))
  w = jax.random.normal(jax.random.key(2), (4, 6, 3))
  np.testing.assert_array_equal(ours(x), ref(x))
  loss = lambda m, x: jnp.sum(w * jnp.tanh(m(x)))
  g_ours = nnx.grad(loss, argnums=(0, 1))(ours, x)
  g_ref = nnx.grad(loss, argnums=(0, 1))(ref, x)
  for a, b in zip(jax.tree.leaves(g_ours), jax.tree.leaves(g_ref)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # the bias gradient under vmap over a leading (seed) axis of both arguments
  ys, bs = jax.random.normal(jax.random.key(3), (2, 7, 3)), jnp.ones((2, 3))
  g = jax.vmap(jax.grad(lambda y, b: jnp.sum(jnp.sin(add_bias(y, b))), argnums=1))(ys, bs)
  np.testing.assert_allclose(g, jnp.cos(ys + 1.0).sum(1), rtol=1e-5)


@pytest.mark.parametrize("d_in,d_out", [(5, 3), (3, 5)])
def test_matmul_gradient_is_the_float64_product_in_either_orientation(d_in, d_out):
  """linear.matmul's hand-written kernel gradient (it transposes the smaller
  operand: x^T dy when d_in <= d_out, else (dy^T x)^T) against float64 numpy,
  alone and under vmap over a leading (seed) axis; the forward is x @ kernel."""
  from pe_spectral.nn.linear import matmul
  x = jax.random.normal(jax.random.key(1), (2, 4, 6, d_in))
  k = jax.random.normal(jax.random.key(2), (2, d_in, d_out))
  w = jax.random.normal(jax.random.key(3), (2, 4, 6, d_out))
  loss = lambda x, k, w: jnp.sum(w * matmul(x, k))
  np.testing.assert_array_equal(matmul(x[0], k[0]), x[0] @ k[0])
  dx, dk = jax.vmap(jax.grad(loss, argnums=(0, 1)))(x, k, w)
  x64, k64, w64 = (np.asarray(a, np.float64) for a in (x, k, w))
  np.testing.assert_allclose(dk, np.einsum("sbni,sbno->sio", x64, w64), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, np.einsum("sbno,sio->sbni", w64, k64), rtol=1e-5, atol=1e-5)


def test_speed_layer_matches_reference_path_and_reference_supports_jvp():
  """The one switch (pe_spectral.runtime.speed): the whole model's training loss and
  gradient with the speed layer (custom VJPs, fast dropout bits) equal the
  plain path's, dropout included; forward-mode AD, which the custom VJPs do not
  support, works through the reference path."""
  from pe_spectral.data import tasks
  from pe_spectral.runtime import speed
  from pe_spectral.training import config as configs
  from pe_spectral.training import train
  rc = configs.build("smoke", "distance", "rope", steps=2)
  data = tasks.generate(rc.task, num_examples=64)
  key = jax.random.key(3)

  def loss_and_grad():
    tr = train.make_steps(rc.model, rc.task, rc.train, 64)
    params = tr.init_one(jnp.uint32(0))["params"]
    f = lambda p: tr.loss(p, data.train_ids[:16], data.train_labels[:16], key)[0]
    return params, f, jax.jit(jax.value_and_grad(f))(params)

  assert speed.enabled()
  params, f_fast, (l_fast, g_fast) = loss_and_grad()
  with speed.reference():
    assert not speed.enabled()
    _, f_ref, (l_ref, g_ref) = loss_and_grad()
    tangent = jax.tree.map(jnp.ones_like, params)
    _, jvp = jax.jit(lambda p, t: jax.jvp(f_ref, (p,), (t,)))(params, tangent)
  assert speed.enabled()
  np.testing.assert_allclose(l_fast, l_ref, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g_fast), jax.tree.leaves(g_ref)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  want = sum(float(jnp.sum(g)) for g in jax.tree.leaves(g_ref))  # <grad, ones>
  np.testing.assert_allclose(float(jvp), want, rtol=1e-3, atol=1e-4)
  with pytest.raises(TypeError):  # the fast path is reverse-mode only
    jax.jvp(f_fast, (params,), (tangent,))

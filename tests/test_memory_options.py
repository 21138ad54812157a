"""The memory options: the blockwise attention kernel, its block-by-block
dropout bits, and per-block rematerialisation. Each is held to the standard
kernel, to plain autodiff, and (for the bits) to ``jax.random.bernoulli``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.nn import rng
from pe_spectral.nn.attention import attention, blockwise_attention
from pe_spectral.nn.model import ModelConfig, apply_model, init_model
from pe_spectral.runtime import speed


@pytest.fixture(autouse=True)
def _exact_matmuls():
  with jax.default_matmul_precision("highest"):
    yield


@pytest.mark.parametrize("start,size", [(0, 4), (4, 4), (8, 4), (3, 2), (9, 3)])
def test_bernoulli_rows_are_the_whole_masks_rows(start, size):
  key = jax.random.key(3)
  full = (2, 3, 10, 7)
  whole = np.asarray(jax.random.bernoulli(key, 0.7, full))
  got = np.asarray(jax.jit(lambda s: rng.bernoulli_rows(key, 0.7, full, 2, s, size))(start))
  assert got.shape == (2, 3, size, 7)
  n = min(size, full[2] - start)  # rows past the end are the caller's to drop
  np.testing.assert_array_equal(got[:, :, :n], whole[:, :, start:start + n])
  # a key the straight-line hash does not cover: jax's own bits, sliced
  rbg = jax.random.key(3, impl="rbg")
  whole = np.asarray(jax.random.bernoulli(rbg, 0.7, full))
  got = np.asarray(jax.jit(lambda s: rng.bernoulli_rows(rbg, 0.7, full, 2, s, size))(start))
  np.testing.assert_array_equal(got[:, :, :n], whole[:, :, start:start + n])


def _operands(b=2, n=10, h=3, d=4, bias_shape=None, factor=False):
  ks = jax.random.split(jax.random.key(0), 6)
  q = jax.random.normal(ks[0], (b, n, h, d))
  k = jax.random.normal(ks[1], (b, n, h, d))
  v = jax.random.normal(ks[2], (b, n, h, d + 1))
  bias = None if bias_shape is None else jax.random.normal(ks[3], bias_shape)
  fac = jax.random.uniform(ks[4], (h, n, n), minval=0.2) if factor else None
  # padding keys of the second example masked, as the clean model does
  mask = (jnp.arange(n)[None, None, None, :] < jnp.asarray([n, n - 3])[:, None, None, None])
  return q, k, v, bias, fac, mask


def _value_and_grads(q, k, v, bias, fac, mask, *, block, rate, reference=False):
  def loss(q, k, v, bias, fac):
    out = attention(q, k, v, bias=bias, factor=fac, mask=mask, dropout_rate=rate,
                    dropout_key=jax.random.key(7) if rate else None, query_block=block)
    return jnp.sum(jnp.sin(out) * out)
  argnums = tuple(i for i, x in enumerate((q, k, v, bias, fac)) if x is not None)
  fn = jax.value_and_grad(loss, argnums=argnums)
  if reference:
    with speed.reference():  # plain autodiff through jnp
      return fn(q, k, v, bias, fac)
  return jax.jit(fn)(q, k, v, bias, fac)


@pytest.mark.parametrize("bias_shape,factor", [
    (None, False), ((3, 10, 10), False), ((2, 3, 10, 10), True), ((1, 3, 1, 10), False),
    (None, True)])
def test_blockwise_kernel_equals_standard_kernel_and_autodiff(bias_shape, factor):
  ops = _operands(bias_shape=bias_shape, factor=factor)
  rate = 0.3  # dropout on: the blocks must regenerate the whole mask's bits
  ref = _value_and_grads(*ops, block=None, rate=rate, reference=True)
  std = _value_and_grads(*ops, block=None, rate=rate)
  for block in (1, 4, 16):  # one row, a padded last block, one block for all
    got = _value_and_grads(*ops, block=block, rate=rate)
    for other in (ref, std):
      np.testing.assert_allclose(got[0], other[0], rtol=2e-6)
      for a, b in zip(got[1], other[1]):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=2e-5, err_msg=f"block {block}")


def test_blockwise_forward_matches_a_float64_loop_without_dropout():
  q, k, v, bias, fac, mask = _operands(bias_shape=(3, 10, 10), factor=True)
  # under differentiation (the blocks' loop) and outside it (the one-shot forward)
  fn = lambda q: blockwise_attention(q, k, v, bias=bias, factor=fac, mask=mask, scale=0.5,
                                     query_block=4)
  got, _ = jax.vjp(fn, q)
  np.testing.assert_allclose(fn(q), got, atol=2e-6)
  q64, k64, v64 = (np.asarray(x, np.float64) for x in (q, k, v))
  want = np.zeros(got.shape)
  for bi in range(q.shape[0]):
    for hi in range(q.shape[2]):
      logits = (q64[bi, :, hi] @ k64[bi, :, hi].T * 0.5) * np.asarray(fac[hi])
      logits = logits + np.asarray(bias[hi])
      logits = np.where(np.asarray(mask[bi, 0]), logits, -np.inf)
      p = np.exp(logits - logits.max(-1, keepdims=True))
      want[bi, :, hi] = (p / p.sum(-1, keepdims=True)) @ v64[bi, :, hi]
  np.testing.assert_allclose(got, want, atol=2e-6)


def test_blockwise_kernel_refuses_a_bad_block():
  q, k, v, *_ = _operands()
  with pytest.raises(ValueError, match="query_block"):
    blockwise_attention(q, k, v, scale=1.0, query_block=0)
  with pytest.raises(ValueError, match="attention_block"):
    ModelConfig(attention_block=0)
  with pytest.raises(ValueError, match="remat"):
    ModelConfig(remat="yes")


def _loss_and_grads(cfg, ids, labels):
  graphdef, params = init_model(cfg, jax.random.key(1))

  def loss(p):
    logits = apply_model(graphdef, p, ids, dropout_key=jax.random.key(3))
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(labels)), labels])
  return jax.jit(jax.value_and_grad(loss))(params)


# every kind of PE the kernel serves: rotary, additive bias, Hadamard factor,
# contextual (CoPE), latent attention, and the paper's model
@pytest.mark.parametrize("pe,faithful", [("rope", False), ("alibi", False),
                                         ("alibi_multiplicative", False), ("cope", False),
                                         ("mla", False), ("rope_sinusoidal", True)])
def test_memory_options_train_the_same_model(pe, faithful):
  ids = jax.random.randint(jax.random.key(2), (4, 12), 1, 30).at[1:, -3:].set(0)
  labels = jnp.arange(4)
  base = ModelConfig(pe=pe, vocab_size=30, num_classes=30, d_model=16, num_heads=4,
                     num_layers=2, d_ff=32, max_len=12, faithful=faithful)
  l0, g0 = _loss_and_grads(base, ids, labels)
  each = (dict(attention_block=5), dict(remat=True)) if pe == "rope" else ()
  for options in each + (dict(attention_block=5, remat=True),):
    l1, g1 = _loss_and_grads(base.replace(**options), ids, labels)
    np.testing.assert_allclose(l1, l0, rtol=1e-6, err_msg=str(options))
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
      np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5, err_msg=str(options))


def _dot_dtypes(fn, *args) -> set:
  """The operand dtypes of every matmul in ``fn``'s jaxpr (sub-jaxprs included)."""
  found = set()

  def walk(jaxpr):
    for e in jaxpr.eqns:
      if e.primitive.name == "dot_general":
        found.add(tuple(str(v.aval.dtype) for v in e.invars))
      for val in e.params.values():
        for sub in (val if isinstance(val, (list, tuple)) else [val]):
          inner = getattr(sub, "jaxpr", sub)
          if hasattr(inner, "eqns"):
            walk(inner)
  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return found


def _flat(tree):
  return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])


@pytest.mark.parametrize("pe,faithful", [("rope", False), ("alibi", False),
                                         ("alibi_multiplicative", False), ("cope", False),
                                         ("mla", False), ("rope_sinusoidal", True)])
def test_bfloat16_is_the_float32_model_to_bfloat16_rounding(pe, faithful):
  """Mixed precision: float32 parameters and gradients, float32 loss, the
  forward pass in bfloat16 -- the float32 model's loss and gradient direction
  to bfloat16 rounding, with the memory options too (their custom VJPs get
  bfloat16 cotangents)."""
  ids = jax.random.randint(jax.random.key(2), (4, 12), 1, 30).at[1:, -3:].set(0)
  labels = jnp.arange(4)
  base = ModelConfig(pe=pe, vocab_size=30, num_classes=30, d_model=16, num_heads=4,
                     num_layers=2, d_ff=32, max_len=12, faithful=faithful)
  l0, g0 = _loss_and_grads(base, ids, labels)
  g0 = _flat(g0)
  for options in ({}, dict(attention_block=5, remat=True)):
    cfg = base.replace(dtype="bfloat16", **options)
    l1, g1 = _loss_and_grads(cfg, ids, labels)
    assert l1.dtype == jnp.float32
    assert {x.dtype for x in jax.tree.leaves(g1)} == {jnp.dtype(jnp.float32)}
    np.testing.assert_allclose(l1, l0, rtol=3e-2, err_msg=str(options))
    g1 = _flat(g1)
    cos = g1 @ g0 / (np.linalg.norm(g1) * np.linalg.norm(g0))
    assert cos > 0.99, (options, cos)
    assert np.linalg.norm(g1 - g0) > 0  # it did run in another precision
  # the matmuls themselves take bfloat16 operands (all of them but the
  # embedding-free float32 loss) in bfloat16 mode, and none do in float32
  graphdef, params = init_model(base, jax.random.key(1))
  g16, _ = init_model(base.replace(dtype="bfloat16"), jax.random.key(1))
  fwd = lambda g: (lambda p: apply_model(g, p, ids))
  assert ("bfloat16", "bfloat16") in _dot_dtypes(fwd(g16), params)
  assert not any("bfloat16" in d for d in _dot_dtypes(fwd(graphdef), params))
  assert apply_model(g16, params, ids).dtype == jnp.float32


@pytest.mark.parametrize("block", [None, 4])
def test_kernels_take_bfloat16_and_return_its_cotangents(block):
  """Both kernels' custom VJPs under bfloat16 operands: cotangents in the
  operands' dtypes, and the float32 kernel's numbers to bfloat16 rounding."""
  q, k, v, bias, fac, mask = _operands(bias_shape=(3, 10, 10), factor=True)
  low = [x.astype(jnp.bfloat16) for x in (q, k, v)]
  got = _value_and_grads(*low, bias, fac, mask, block=block, rate=0.3)
  want = _value_and_grads(*(x.astype(jnp.float32) for x in low), bias, fac, mask,
                          block=None, rate=0.3)
  assert [g.dtype for g in got[1]] == [jnp.bfloat16] * 3 + [jnp.float32] * 2
  np.testing.assert_allclose(np.float32(got[0]), want[0], rtol=3e-2)
  for a, b in zip(got[1], want[1]):
    a, b = np.asarray(a, np.float32), np.asarray(b)
    assert np.linalg.norm(a - b) <= 3e-2 * np.linalg.norm(b)


def test_dtype_is_validated_and_float32_is_recorded_as_the_default():
  from pe_spectral.training import config
  with pytest.raises(ValueError, match="dtype"):
    ModelConfig(dtype="float16")
  with pytest.raises(ValueError, match="dtype"):
    config.build("smoke", "distance", "rope", dtype="half")
  assert config.build("smoke", "distance", "rope", dtype="float32").model.dtype is None
  assert config.build("smoke", "distance", "rope", dtype="bfloat16").model.dtype == "bfloat16"


def test_a_bfloat16_run_trains_and_records_its_dtype(tmp_path):
  import json

  from pe_spectral.training import config, runner
  rc = config.build("smoke", "distance", "rope", steps=24, dtype="bfloat16",
                    learning_rate=3e-3)
  s = runner.run(rc, [0, 1], str(tmp_path / "run"), runner.RunOptions(eval_every=12),
                 runner.Hooks(notify=lambda m: None))
  with open(tmp_path / "run" / "config.json") as f:
    assert json.load(f)["run"]["model"]["dtype"] == "bfloat16"
  rows = runner.read_jsonl(str(tmp_path / "run" / "metrics.jsonl"))
  first, last = np.asarray(rows[0]["train_loss"]), np.asarray(rows[-1]["train_loss"])
  assert np.isfinite(last).all() and (last < first).all(), (first, last)
  assert np.isfinite(s["test_accuracy"]).all()


def _temporaries(fn, *args) -> int:
  return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_remat_checkpoint_recomputes_and_saves_memory_where_jax_checkpoint_does_not():
  """The CPU compiler merges ``jax.checkpoint``'s recomputation back into the
  forward pass; :func:`remat.checkpoint` must give the same gradient with
  fewer temporaries than no remat at all (``memory_analysis`` is deterministic:
  a compiled program's buffer sizes, not a timing)."""
  from pe_spectral.nn import remat

  def layer(w, x):
    for _ in range(4):
      x = jnp.tanh(x @ w)
    return x

  def loss(ws, x, wrap):
    for w in ws:
      x = wrap(layer)(w, x)
    return jnp.sum(x)

  mine = lambda f: lambda w, x: remat.checkpoint(lambda d, _: f(*d))((w, x), None)
  ws = [jnp.full((64, 64), 0.01) * (i + 1) for i in range(6)]
  x = jnp.linspace(-1.0, 1.0, 1024 * 64).reshape(1024, 64)
  plain = jax.grad(lambda ws, x: loss(ws, x, lambda f: f), argnums=(0, 1))
  ours = jax.grad(lambda ws, x: loss(ws, x, mine), argnums=(0, 1))
  for a, b in zip(jax.tree.leaves(jax.jit(ours)(ws, x)), jax.tree.leaves(plain(ws, x))):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert _temporaries(ours, ws, x) < 0.6 * _temporaries(plain, ws, x)


def test_model_remat_keeps_fewer_temporaries():
  cfg = ModelConfig(pe="rope", vocab_size=30, num_classes=30, d_model=16, num_heads=2,
                    num_layers=4, d_ff=32, max_len=32)
  ids = jnp.ones((16, 32), jnp.int32)

  def grad_fn(c):
    graphdef, params = init_model(c, jax.random.key(0))
    f = jax.grad(lambda p: apply_model(graphdef, p, ids, dropout_key=jax.random.key(1)).sum())
    return _temporaries(f, params)
  base = grad_fn(cfg)
  assert grad_fn(cfg.replace(remat=True)) < 0.6 * base
  assert grad_fn(cfg.replace(attention_block=8)) < base


def test_choose_seed_group_takes_the_widest_group_that_fits():
  from pe_spectral.runtime.memory import choose_seed_group
  needs = lambda g: 10 + 3 * g  # bytes grow with the group
  assert choose_seed_group(8, needs, 10 ** 6) == (8, {8: 34})
  g, measured = choose_seed_group(8, needs, 23)
  assert g == 4 and list(measured) == [8, 4]  # widest first; stops at the first fit
  assert choose_seed_group(6, needs, 20)[0] == 3  # divisors of 6 only: 6, 3
  g, measured = choose_seed_group(8, needs, 5)  # nothing fits: one at a time
  assert g == 1 and list(measured) == [8, 4, 2, 1]
  with pytest.raises(ValueError):
    choose_seed_group(0, needs, 5)


def test_auto_seed_group_follows_the_compiled_programs_memory():
  """Against the bytes of the very programs it compiles: a limit between what
  2 and 4 vmapped seeds need picks 2."""
  from pe_spectral.training import config as configs
  from pe_spectral.training.sizing import auto_seed_group, group_bytes
  rc = configs.build("smoke", "distance", "rope")
  n = rc.task.num_train
  size = lambda g: group_bytes(rc.model, rc.task, rc.train, num_train=n, num_seeds=4,
                               seed_group=None if g == 4 else g)  # cached: compiled once
  two, four = size(2), size(4)
  assert two < four
  notes = []
  got = auto_seed_group(rc.model, rc.task, rc.train, num_train=n, num_seeds=4,
                        limit_bytes=(two + four) // 2, notify=notes.append)
  assert got == 2 and "4 seeds, 2 at a time" in notes[0]
  assert auto_seed_group(rc.model, rc.task, rc.train, num_train=n, num_seeds=4,
                         limit_bytes=four) is None  # all fit: one vmap
  # the budget in GiB, as the sweep's --memory_gib passes it
  gib = lambda b: b / 1024 ** 3
  assert auto_seed_group(rc.model, rc.task, rc.train, num_train=n, num_seeds=4,
                         memory_gib=gib((two + four) // 2)) == 2


def test_cpu_memory_available_is_what_the_kernel_says_is_free():
  """On a CPU the free memory, not the machine's total: at least (nearly) the
  pages the kernel reports free (MemAvailable also counts reclaimable cache),
  at most physical memory."""
  import os

  from pe_spectral.runtime.memory import device_memory_available, device_memory_limit
  free_pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  avail = device_memory_available()
  assert 0.8 * free_pages <= avail < device_memory_limit()  # never the total


def test_memory_budget_is_the_given_size_or_a_share_of_the_free_memory(monkeypatch):
  """memory_gib exactly; else 90 % of this process's share of the free
  memory (N processes on one device: 1/N each); unknown memory says so."""
  from pe_spectral.runtime import memory
  monkeypatch.setattr(memory, "device_memory_available", lambda device=None: 40 * 1024 ** 3)
  assert memory.memory_budget(memory_gib=1.5) == (int(1.5 * 1024 ** 3), "memory_gib")
  usable, source = memory.memory_budget()
  assert usable == int(0.9 * 40 * 1024 ** 3) and "90% of 40.00 GiB free" in source
  usable, source = memory.memory_budget(fraction=0.25)
  assert usable == int(0.9 * 10 * 1024 ** 3) and "memory_fraction=0.25" in source
  for bad in (dict(memory_gib=0), dict(memory_gib=-1), dict(fraction=0), dict(fraction=1.5)):
    with pytest.raises(ValueError):
      memory.memory_budget(**bad)
  monkeypatch.setattr(memory, "device_memory_available", lambda device=None: None)
  usable, source = memory.memory_budget()
  assert usable is None and "unknown" in source

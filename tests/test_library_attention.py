"""The library attention path (``jax.nn.dot_product_attention``, CPU: its XLA
implementation) against the project's kernel: values and gradients, with
padding and causal masks, additive biases, values narrower than the queries
(latent attention), under ``vmap`` over seeds, for every PE it serves; and
its refusals, each one line naming what it cannot compute."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.nn.attention import attention, library_attention
from pe_spectral.nn.model import ModelConfig, apply_model, init_model
from pe_spectral.pe import encodings
from pe_spectral.training import config

# the PEs whose logits are q·k after a q/k transform, or q·k plus an additive
# bias, or that only change the input: what the issue asks the path to serve
SERVED = {"nope", "sinusoidal", "learned", "rope", "partial_rope", "rope_sinusoidal", "p_rope",
          "xpos", "mla", "alibi", "relative", "kerple_log", "kerple_power", "fire",
          "rope_additive", "pope", "rope_learned", "alibi_data"}


@pytest.fixture(autouse=True)
def _exact_matmuls():
  with jax.default_matmul_precision("highest"):
    yield


def _serves(pe: str) -> bool:
  try:
    ModelConfig(pe=pe, attention_impl="xla",
                causal=encodings.get(pe).causal_only)
  except ValueError:
    return False
  return True


def test_the_path_serves_exactly_the_q_k_plus_bias_pes():
  # a PE added to the registry lands on one side or the other: this names it
  served = {pe for pe in encodings.names() if _serves(pe)}
  refused = set(encodings.names()) - served
  assert SERVED <= served, SERVED - served
  assert {"alibi_multiplicative", "cope"} <= refused
  for pe in served - SERVED:  # a new PE the path takes must be q·k (+ bias)
    assert not {"factor", "contextual"} & set(encodings.get(pe).kinds), pe


def _operands(b=2, n=9, h=3, d=6, d_v=6, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  q = jax.random.normal(ks[0], (b, n, h, d))
  k = jax.random.normal(ks[1], (b, n, h, d))
  v = jax.random.normal(ks[2], (b, n, h, d_v))
  return q, k, v, ks[3]


def _masks(b, n):
  padding = (jnp.arange(n)[None, None, None, :] < jnp.asarray([n, n - 3])[:b, None, None, None])
  causal = jnp.tril(jnp.ones((n, n), bool))[None, None]
  return {"none": None, "padding": padding, "causal": causal, "both": padding & causal}


# every mask and every bias shape the model passes (per head, per example,
# broadcast), and values narrower than the queries
@pytest.mark.parametrize("mask_kind,bias_shape,d_v", [
    ("none", None, 6), ("padding", (3, 9, 9), 6), ("causal", (2, 3, 9, 9), 6),
    ("both", (1, 9), 6), ("padding", None, 4), ("both", (3, 9, 9), 4)])
def test_values_and_gradients_equal_the_projects_kernel(mask_kind, bias_shape, d_v):
  q, k, v, key = _operands(d_v=d_v)
  mask = _masks(2, 9)[mask_kind]
  bias = None if bias_shape is None else jax.random.normal(key, bias_shape)

  def loss(impl):
    def f(q, k, v, bias):
      out = attention(q, k, v, bias=bias, mask=mask, implementation=impl)
      if mask_kind in ("padding", "both"):  # a fully padded query row is never pooled
        out = out * (jnp.arange(9) < jnp.asarray([9, 6])[:, None])[..., None, None]
      return jnp.sum(jnp.sin(out) * out)
    return f

  argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)
  want = jax.jit(jax.value_and_grad(loss(None), argnums=argnums))(q, k, v, bias)
  got = jax.jit(jax.value_and_grad(loss("xla"), argnums=argnums))(q, k, v, bias)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  for name, a, b in zip("qkvb", got[1], want[1]):
    assert a.shape == b.shape, name
    np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5, err_msg=name)
  # "jax" (the library's own choice) is the same function on the CPU
  again = attention(q, k, v, bias=bias, mask=mask, implementation="jax")
  np.testing.assert_allclose(again, attention(q, k, v, bias=bias, mask=mask,
                                              implementation="xla"), rtol=1e-6, atol=1e-7)


def test_the_wrapper_pads_narrow_values_exactly():
  """Zero-padded value channels leave the others' outputs unchanged: a
  dense float64 softmax written here is the oracle."""
  q, k, v, _ = _operands(d_v=2)
  out = np.asarray(library_attention(q, k, v, scale=0.3), np.float64)
  qn, kn, vn = (np.asarray(x, np.float64) for x in (q, k, v))
  logits = np.einsum("bqhd,bkhd->bhqk", qn, kn) * 0.3
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", p, vn), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="implementation must be one of"):
    library_attention(q, k, v, implementation="flash")
  with pytest.raises(ValueError, match="'cudnn' .* takes bfloat16 or float16 queries, got "
                                       "float32"):
    library_attention(q, k, v, implementation="cudnn")


def _model_loss_and_grads(cfg, ids, labels, seeds=3):
  """Loss and gradients of ``seeds`` models at once (``vmap`` over their
  parameters, as the sweep trains them)."""
  graphdef, _ = init_model(cfg, jax.random.key(0))
  params = jax.vmap(lambda key: init_model(cfg, key)[1])(
      jax.random.split(jax.random.key(1), seeds))

  def loss(p):
    logits = apply_model(graphdef, p, ids, dropout_key=jax.random.key(3))
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(labels)), labels])
  return jax.jit(jax.vmap(jax.value_and_grad(loss)))(params)


def _served_by_the_registry():
  """Every registered PE the path accepts (not a fixed list: a PE newly served
  is compared as soon as it is registered)."""
  out = []
  for pe in encodings.names():
    try:
      ModelConfig(pe=pe, attention_impl="xla")
    except ValueError:
      continue
    out.append(pe)
  return out


@pytest.mark.parametrize("pe", _served_by_the_registry())
def test_every_served_pe_trains_the_same_model(pe):
  """Each served PE, clean (padding masked) and, for rotary and bias PEs,
  causal: the library path's loss and gradients equal the project kernel's
  under vmap over three seeds. Dropout 0: the library has none on the
  probabilities (the output and feed-forward dropout stay on their keys)."""
  ids = jax.random.randint(jax.random.key(2), (4, 12), 1, 30).at[1:, -3:].set(0)
  labels = jnp.arange(4)
  base = ModelConfig(pe=pe, vocab_size=30, num_classes=30, d_model=24, num_heads=4,
                     num_layers=2, d_ff=32, max_len=12, dropout=0.0)
  variants = [base]
  if pe in ("rope", "alibi", "relative"):
    variants.append(base.replace(causal=True))
  if pe == "rope_sinusoidal":  # the paper's model: keys from the input, no padding mask
    variants.append(base.replace(faithful=True))
  for cfg in variants:
    l0, g0 = _model_loss_and_grads(cfg, ids, labels)
    l1, g1 = _model_loss_and_grads(cfg.replace(attention_impl="xla"), ids, labels)
    assert l0.shape == (3,)
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
      np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)


def test_bfloat16_runs_through_the_library_path():
  ids = jax.random.randint(jax.random.key(2), (4, 12), 1, 30)
  base = ModelConfig(pe="alibi", vocab_size=30, num_classes=30, d_model=24, num_heads=4,
                     num_layers=2, d_ff=32, max_len=12, dropout=0.0, dtype="bfloat16")
  l0, _ = _model_loss_and_grads(base, ids, jnp.arange(4))
  l1, g1 = _model_loss_and_grads(base.replace(attention_impl="xla"), ids, jnp.arange(4))
  assert {x.dtype for x in jax.tree.leaves(g1)} == {jnp.dtype(jnp.float32)}
  np.testing.assert_allclose(l1, l0, rtol=3e-2)


@pytest.mark.parametrize("pe,what", [("alibi_multiplicative", "multiplicative factor"),
                                     ("cope", "term computed from the queries and keys")])
def test_a_pe_with_other_logits_is_refused_by_name(pe, what):
  with pytest.raises(ValueError, match=f"cannot run pe='{pe}', whose logits have a {what}"):
    ModelConfig(pe=pe, attention_impl="xla")
  ModelConfig(pe=pe, attention_impl="own")  # its own kernel serves it


def test_refusals_and_the_own_spelling():
  assert ModelConfig(attention_impl="own").attention_impl is None  # recorded as before
  with pytest.raises(ValueError, match="attention_impl must be"):
    ModelConfig(attention_impl="flash")
  with pytest.raises(ValueError, match="exclude each other"):
    ModelConfig(attention_impl="xla", attention_block=8)
  q, k, v, key = _operands()
  with pytest.raises(ValueError, match="no dropout on the attention probabilities"):
    attention(q, k, v, implementation="xla", dropout_rate=0.1, dropout_key=key)
  with pytest.raises(ValueError, match="no multiplicative logit factor"):
    attention(q, k, v, implementation="xla", factor=jnp.ones((3, 9, 9)))


def test_training_with_probability_dropout_is_refused_but_evaluation_runs():
  # the clean model drops attention probabilities at its dropout rate: a
  # training config with the library path says so in one line ...
  with pytest.raises(ValueError, match=r"no dropout on the attention probabilities, which "
                                       r"this run trains with at rate 0\.1"):
    config.build("smoke", "distance", "rope", attention_impl="xla")
  rc = config.build("smoke", "distance", "rope", attention_impl="xla",
                    overrides={"model": {"dropout": 0.0}})
  assert rc.model.attention_impl == "xla"
  # the paper's MLA script has no attention dropout: trains as it is
  assert config.build("smoke", "distance", "mla", faithful=True,
                      attention_impl="xla").model.dropout > 0
  # ... while the trained model (dropout 0.1) evaluates through it, no key, no dropout
  cfg = ModelConfig(pe="rope", vocab_size=30, num_classes=30, d_model=24, num_heads=4,
                    num_layers=1, d_ff=32, max_len=12)
  graphdef, params = init_model(cfg, jax.random.key(1))
  lib, _ = init_model(cfg.replace(attention_impl="xla"), jax.random.key(1))
  ids = jax.random.randint(jax.random.key(2), (2, 12), 1, 30)
  np.testing.assert_allclose(apply_model(lib, params, ids), apply_model(graphdef, params, ids),
                             atol=2e-6)
  with pytest.raises(ValueError, match="no dropout on the attention probabilities"):
    apply_model(lib, params, ids, dropout_key=jax.random.key(0))

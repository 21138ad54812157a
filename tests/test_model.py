import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from pe_spectral.nn.attention import MultiHeadAttention
from pe_spectral.nn.model import ModelConfig, apply_model, init_model
from pe_spectral.pe import encodings
from pe_spectral.pe import positional as P
from pe_spectral.training.config import MODEL_PRESETS as PRESETS

TINY = dict(PRESETS["smoke"], vocab_size=23, num_classes=5)


def _cfg(pe, **kw):
  if pe == "mla":  # a rotary channel narrower than the heads (default: the head width)
    kw.setdefault("pe_options", {"rope_dim": 4})
  kw.setdefault("causal", encodings.get(pe).causal_only)  # PaTH, stick-breaking
  return ModelConfig(pe=pe, **{**TINY, **kw})


def _ids(key, b=3, s=10, lengths=(10, 7, 4)):
  ids = jax.random.randint(key, (b, s), 1, TINY["vocab_size"])
  return jnp.where(jnp.arange(s)[None] < jnp.asarray(lengths)[:, None], ids, 0)


@pytest.mark.parametrize("faithful", [False, True])
@pytest.mark.parametrize("pe", encodings.names())
def test_every_pe_forward_backward_finite(pe, faithful):
  cfg = _cfg(pe, faithful=faithful)  # partial_rope: k = 1 (its default)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids(jax.random.key(1))

  def loss(p):
    logits = apply_model(graphdef, p, ids, dropout_key=jax.random.key(2))
    return jax.nn.logsumexp(logits, -1).mean()

  val, grads = jax.value_and_grad(loss)(params)
  assert np.isfinite(float(val))
  leaves = jax.tree.leaves(grads)
  assert all(bool(jnp.isfinite(g).all()) for g in leaves)
  assert any(float(jnp.abs(g).max()) > 0 for g in leaves)


@pytest.mark.parametrize("faithful", [False, True])
@pytest.mark.parametrize("pe", [p for p in encodings.names() if p != "nope"])
def test_every_pe_makes_output_depend_on_order(pe, faithful):
  """A PE that is the identity (or zero) would leave a NoPE-like model order-blind."""
  cfg = _cfg(pe, faithful=faithful, dropout=0.0)
  graphdef, params = init_model(cfg, jax.random.key(0))
  if pe == "cope":  # its table starts at zero (the paper's init: NoPE at step 0)
    for l, blk in params["blocks"].items():
      blk["cope_pos_emb"] = jax.random.normal(jax.random.key(l), blk["cope_pos_emb"].shape)
  ids = _ids(jax.random.key(1), lengths=(10, 10, 10))
  perm = jax.random.permutation(jax.random.key(5), 10)
  a = apply_model(graphdef, params, ids)
  b = apply_model(graphdef, params, ids[:, perm])
  assert float(jnp.abs(a - b).max()) > 1e-5


@pytest.mark.parametrize("faithful", [False, True])
def test_nope_is_permutation_invariant(faithful):
  cfg = _cfg("nope", faithful=faithful)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids(jax.random.key(1), lengths=(10, 10, 10))
  perm = jax.random.permutation(jax.random.key(5), 10)
  np.testing.assert_allclose(apply_model(graphdef, params, ids[:, perm]),
                             apply_model(graphdef, params, ids), atol=2e-5)


@pytest.mark.parametrize("pe", encodings.names())
def test_clean_mode_ignores_extra_padding(pe):
  cfg = _cfg(pe)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids(jax.random.key(1), s=10)
  padded = jnp.pad(ids, ((0, 0), (0, 6)))
  np.testing.assert_allclose(apply_model(graphdef, params, padded),
                             apply_model(graphdef, params, ids), atol=2e-5)


def test_faithful_mode_sees_padding():
  """The paper's model neither masks nor excludes pads (PROTOCOL §5.4)."""
  cfg = _cfg("rope", faithful=True)
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids(jax.random.key(1), s=10)
  padded = jnp.pad(ids, ((0, 0), (0, 6)))
  diff = apply_model(graphdef, params, padded) - apply_model(graphdef, params, ids)
  assert float(jnp.abs(diff).max()) > 1e-4


def _block_oracle(block, x, kv_input):
  """x + attn(LN1 x, kv) then the ReLU FFN, written out by hand."""
  pos = jnp.arange(x.shape[1])
  h = block.ln1(x)
  kv = h if kv_input is None else kv_input
  x = x + block.attn(h, kv, positions=pos)
  return x + block.ff2(jax.nn.relu(block.ff1(block.ln2(x))))


@pytest.mark.parametrize("faithful", [False, True])
def test_block_keys_values_source(faithful):
  """Faithful: K/V of every layer come from the input embeddings E (PROTOCOL §2.1)."""
  cfg = _cfg("rope", faithful=faithful, dropout=0.0)
  model = nnx.merge(*init_model(cfg, jax.random.key(0)))
  ids = _ids(jax.random.key(1), lengths=(10, 10, 10))
  e = model.embed_inputs(ids)
  x = jax.random.normal(jax.random.key(2), e.shape)
  block = model.blocks[1]
  got = block(x, e, positions=jnp.arange(10), mask=None,
              head_mask=None, key=None)
  want = _block_oracle(block, x, e if faithful else None)
  other = _block_oracle(block, x, None if faithful else e)
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert float(jnp.abs(want - other).max()) > 1e-3


def test_partial_rope_leaves_other_heads_bit_identical():
  rngs = nnx.Rngs(0)
  mha = MultiHeadAttention(16, 4, rope_heads=1, rngs=rngs)
  x = jax.random.normal(jax.random.key(1), (2, 9, 16))
  pos = jnp.arange(9)
  q1, k1 = mha.project_qk(x, x, pos)
  mha.rope_heads = 0
  q0, k0 = mha.project_qk(x, x, pos)
  np.testing.assert_array_equal(q1[:, :, 1:], q0[:, :, 1:])
  np.testing.assert_array_equal(k1[:, :, 1:], k0[:, :, 1:])
  assert float(jnp.abs(q1[:, :, 0] - q0[:, :, 0]).max()) > 1e-3


@pytest.mark.parametrize("faithful", [False, True])
def test_partial_rope_zero_heads_equals_nope(faithful):
  ids = _ids(jax.random.key(1))
  outs = []
  for pe in ("partial_rope", "nope"):
    cfg = _cfg(pe, faithful=faithful,
               pe_options={"heads": 0} if pe == "partial_rope" else None)
    outs.append(apply_model(*init_model(cfg, jax.random.key(0)), ids))
  np.testing.assert_array_equal(outs[0], outs[1])


def test_rope_equals_partial_rope_all_heads():
  ids = _ids(jax.random.key(1))
  a = apply_model(*init_model(_cfg("rope"), jax.random.key(0)), ids)
  b = apply_model(*init_model(_cfg("partial_rope", pe_options={"heads": 2}),
                              jax.random.key(0)), ids)
  np.testing.assert_array_equal(a, b)


def test_head_mask_all_ones_is_identity_and_zero_changes_output():
  cfg = _cfg("rope")
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = _ids(jax.random.key(1))
  base = apply_model(graphdef, params, ids)
  ones = jnp.ones((cfg.num_layers, cfg.num_heads))
  np.testing.assert_array_equal(apply_model(graphdef, params, ids, head_mask=ones),
                                base)
  abl = apply_model(graphdef, params, ids, head_mask=ones.at[0, 1].set(0.0))
  assert float(jnp.abs(abl - base).max()) > 1e-5


def test_paper_parameter_counts():
  """Parameter counts of the paper's PyTorch models (docs/protocol.md)."""
  want = {"nope": 3457086, "rope_sinusoidal": 3457086, "relative": 3481566,
          "learned": 3489854, "mla": 3324478}
  for pe, n in want.items():
    cfg = ModelConfig(pe=pe, faithful=True, **PRESETS["paper"])
    shapes = jax.eval_shape(lambda: init_model(cfg, jax.random.key(0))[1])
    assert sum(x.size for x in jax.tree.leaves(shapes)) == n, pe


def test_learned_table_too_short_raises():
  cfg = _cfg("learned")
  graphdef, params = init_model(cfg, jax.random.key(0))
  with pytest.raises(ValueError, match="exceeds max_len"):
    apply_model(graphdef, params, jnp.ones((1, cfg.max_len + 1), jnp.int32))


@pytest.mark.parametrize("kw,msg", [
    (dict(pe="rotary"), "valid names: nope"),
    (dict(d_model=30, num_heads=4), "divisible"),
    (dict(pe="rope", d_model=12, num_heads=4), "even head_dim"),
    (dict(pe="partial_rope", pe_options={"heads": 5}, num_heads=2), "rope_heads"),
    (dict(pe="partial_rope", pe_options={"heads": -1}),
     r"heads \(rope_heads\) must be an int >= 0"),
    (dict(pe="partial_rope", pe_options={"heads": 1.5}), "must be an int >= 0, got 1.5"),
    (dict(pe="partial_rope", pe_options={"heads": True}), "must be an int >= 0, got True"),
    (dict(pe="mla", pe_options={"latent_dim": 0}), "latent_dim must be an int >= 1"),
    (dict(pe="mla", pe_options={"rope_dim": -2}), "rope_dim must be an int >= 1"),
    (dict(pe="mla", pe_options={"rope_dim": 3}), "rope_dim must be even"),
    (dict(pe="mla", d_model=12, num_heads=4), "head width, d_model/num_heads = 3, which is odd"),
    (dict(pe="mla", pe_options={"paper_rotary": 1}), "paper_rotary must be True, False"),
    (dict(num_layers=0), "num_layers"),
    (dict(pe="alibi", pe_options={"slopes": "steep"}), "slopes must be 'standard' or 'paper'"),
    (dict(pe="rope", pe_options={"slopes": "paper"}), "pe='rope' has no options"),
    (dict(pe="rope", pe_options=encodings.AlibiOptions()), "pe='rope' has no options"),
    (dict(pe="xpos", pe_options=encodings.FireOptions()), "must be XPosOptions"),
    (dict(pe="xpos", pe_options={"gama": 0.3}), "has no field 'gama'; its fields: gamma"),
    (dict(pe="xpos", pe_options=("gamma", 0.3)), "must be XPosOptions"),
    (dict(pe="fire", pe_options={"hidden": 0}), "hidden must be an int >= 1"),
    (dict(pe="xpos", pe_options={"gamma": -1.0}), "gamma must be a finite number > 0"),
    (dict(pe="xpos", pe_options={"scale_base": float("nan")}), "scale_base must be"),
    (dict(pe="p_rope", pe_options={"fraction": 1.5}), "fraction must be in"),
    (dict(pe="cope", pe_options={"positions": 1}), "positions must be an int >= 2"),
    (dict(pe="nope", rope_scaling="pi", rope_scaling_factor=2.0), "needs a rotary PE"),
])
def test_bad_config_raises(kw, msg):
  with pytest.raises(ValueError, match=msg):
    ModelConfig(**{**TINY, **kw})


@pytest.mark.parametrize("faithful,override,want", [
    (False, None, "standard"), (True, None, "paper"), (False, "paper", "paper"),
    (True, "standard", "standard")])
def test_alibi_slope_scheme(faithful, override, want):
  cfg = ModelConfig(**{**TINY, "pe": "alibi", "faithful": faithful,
                       "pe_options": {"slopes": override}})
  model = nnx.merge(*init_model(cfg, jax.random.key(0)))
  slopes = (P.alibi_slopes_paper if want == "paper" else P.alibi_slopes)(cfg.num_heads)
  np.testing.assert_allclose(model.blocks[0].bias(5), P.alibi_bias(5, slopes), atol=1e-7)


def test_mla_attention_dropout_clean_only():
  """Clean MLA drops attention probabilities like every clean PE; faithful MLA (the
  paper's) has no attention dropout."""
  for faithful, want in ((False, 0.1), (True, 0.0)):
    cfg = _cfg("mla", faithful=faithful, dropout=0.1)
    model = nnx.merge(*init_model(cfg, jax.random.key(0)))
    attn = model.blocks[0].attn
    assert attn.attn_dropout == want
  x = jax.random.normal(jax.random.key(3), (2, 6, TINY["d_model"]))
  pos = jnp.arange(6)
  attn.attn_dropout = 0.5
  plain = attn.head_outputs(x, positions=pos)
  dropped = attn.head_outputs(x, positions=pos, dropout_key=jax.random.key(4))
  assert not np.allclose(plain, dropped)
  attn.attn_dropout = 0.0
  np.testing.assert_array_equal(
      plain, attn.head_outputs(x, positions=pos, dropout_key=jax.random.key(4)))


@pytest.mark.parametrize("base", [0.0, -10.0, float("nan"), float("inf")])
def test_bad_rope_base_is_refused(base):
  with pytest.raises(ValueError, match="rope_base must be a finite number > 0"):
    ModelConfig(pe="rope", rope_base=base, **{k: v for k, v in PRESETS["smoke"].items()
                                              if k != "rope_base"})


def test_out_of_range_token_ids_are_refused():
  """The embedding gather clamps an id >= vocab_size silently; the model's
  boundary refuses it (concrete ids) instead of returning garbage logits."""
  cfg = ModelConfig(pe="rope", **dict(PRESETS["smoke"], vocab_size=11, num_classes=3))
  graphdef, params = init_model(cfg, jax.random.key(0))
  ok = jnp.full((2, 5), 10)
  assert apply_model(graphdef, params, ok).shape == (2, 3)
  for bad in (jnp.full((2, 5), 11), jnp.full((2, 5), -1)):
    with pytest.raises(ValueError, match=r"token ids must be in \[0, vocab_size=11\)"):
      apply_model(graphdef, params, bad)


def test_script_quirks_name_every_paper_behaviour():
  """A clean run has no quirk; a faithful run those of its script (trans.py,
  or the MLA script for latent attention); the label rule and the budget
  follow them."""
  from pe_spectral.nn import model as M
  from pe_spectral.training import config as configs
  from pe_spectral.training import train
  assert _cfg("rope").quirks == M.CLEAN and _cfg("mla").quirks == M.CLEAN
  assert _cfg("rope", faithful=True).quirks == M.TRANS_PY
  assert _cfg("mla", faithful=True).quirks == M.MLA_SCRIPT
  assert _cfg("mla").attention == "mla" and _cfg("cope").attention == "mha"
  for pe, faithful in (("rope", True), ("mla", True), ("alibi", False)):
    rc = configs.build("smoke", "count", pe, faithful=faithful)
    rule = train.label_rule(rc.task, rc.model)
    assert rule.ignore_zero == (not rc.model.quirks.counts_label_zero)
    base = configs.train_settings("paper", "rope", faithful)
    got = configs.train_settings("paper", pe, faithful)
    q = rc.model.quirks
    assert got["epochs"] == round(q.epochs_factor * base["epochs"])
    assert got["batch_size"] == q.batch_factor * base["batch_size"]


def test_the_model_reads_its_behaviours_from_the_quirks(monkeypatch):
  """Changing one named behaviour changes exactly what it names: the faithful
  rope model with the MLA script's GELU is the same parameters through an
  exact-GELU feed-forward (oracle: the block recomputed by hand), and turning
  on final_norm adds the final LayerNorm."""
  import dataclasses

  from pe_spectral.nn import model as M
  from pe_spectral.nn import model_config as MC  # where ModelConfig looks its quirks up
  cfg = _cfg("rope", faithful=True, dropout=0.0)
  ids = _ids(jax.random.key(1))
  graphdef, params = init_model(cfg, jax.random.key(0))
  relu = apply_model(graphdef, params, ids)
  gelu_quirks = dataclasses.replace(M.TRANS_PY, activation="gelu")
  monkeypatch.setattr(MC, "script_quirks", lambda faithful, attention: gelu_quirks)
  g2, p2 = init_model(cfg, jax.random.key(0))
  gelu = apply_model(g2, p2, ids)
  assert float(jnp.abs(gelu - relu).max()) > 1e-4
  # the oracle: the same forward with the activation swapped by hand
  model = nnx.merge(g2, p2)
  e = model.embed_inputs(ids)
  ctx = model.context(ids)
  x = e
  for blk in model.blocks:
    o = blk.head_outputs(x, e, **ctx)
    x = x + blk.attn.combine(o)
    x = x + blk.ff2(jax.nn.gelu(blk.ff1(blk.ln2(x)), approximate=False))
  np.testing.assert_allclose(gelu, model.classify(x, ids), atol=1e-5)
  normed = dataclasses.replace(M.TRANS_PY, final_norm=True)
  monkeypatch.setattr(MC, "script_quirks", lambda faithful, attention: normed)
  assert "final_ln" in init_model(cfg, jax.random.key(0))[1]
  assert "final_ln" not in params


def test_latent_attention_refuses_what_it_has_no_form_for():
  cfg = _cfg("mla")
  attn = nnx.merge(*init_model(cfg, jax.random.key(0))).blocks[0].attn
  x = jax.random.normal(jax.random.key(3), (2, 6, TINY["d_model"]))
  pos = jnp.arange(6)
  np.testing.assert_array_equal(attn.head_outputs(x, x, positions=pos),
                                attn.head_outputs(x, positions=pos))
  with pytest.raises(ValueError, match="own input"):
    attn.head_outputs(x, x + 1, positions=pos)
  with pytest.raises(ValueError, match="factor"):
    attn.head_outputs(x, positions=pos, factor=jnp.ones((2, 6, 6)))

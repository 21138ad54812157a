"""The Transformer classifier (its configuration: :mod:`pe_spectral.nn.model_config`).

token embedding -> input PE -> N pre-LN blocks -> [final LN] -> mean pool -> linear.

Two modes (``ModelConfig.faithful``):

* **clean** (default): standard pre-LN self-attention; padding keys masked;
  final LayerNorm; mean pool over real tokens; standard ALiBi slopes.
* **faithful**: the paper's code (docs/protocol.md): keys/values of every
  layer are computed from the input embeddings (only queries see the residual
  stream), padding is not masked anywhere, no final LayerNorm, mean over all
  positions, ALiBi slopes ``exp(-h/H)``, and 'mla' is the paper's MLA model
  (GELU, final LN, masked pool, zero-initialised learned APE, shared rotary
  query, its non-rotation 'rotary' transform).

Faithful mode uses PyTorch-default initialisation (as the paper); clean mode
uses LeCun-normal kernels and N(0, 1/d) embeddings (``init_scheme`` selects
either explicitly). On the ``cpu`` preset the clean init reached 94.7% test
accuracy for RoPE on Task 1 against 56.4% with the torch init (one seed each,
same steps). Pure use:

>>> graphdef, params = init_model(cfg, key)
>>> logits = apply_model(graphdef, params, ids)
"""
from __future__ import annotations

from typing import Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_spectral.nn import remat
from pe_spectral.nn.attention import (
  LatentAttention,
  MultiHeadAttention,
  dropout,
)
from pe_spectral.nn.linear import torch_linear
from pe_spectral.nn.model_config import (  # noqa: F401  (the names callers import from here)
  ACTIVATIONS,
  CLEAN,
  LEGACY_OPTIONS,
  LIBRARY_REFUSES,
  MLA_SCRIPT,
  PAD_ID,
  PE_SCOPED,
  TRANS_PY,
  ModelConfig,
  ScriptQuirks,
  _drawn,
  attention_of,
  recorded_fields,
  script_quirks,
  upgrade_record,
)
from pe_spectral.pe import positional
from pe_spectral.pe.base import Kind
from pe_spectral.runtime import speed

__all__ = ["ModelConfig", "TransformerClassifier", "init_model", "apply_model",
           "PAD_ID", "ScriptQuirks", "script_quirks", "attention_of", "CLEAN", "TRANS_PY",
           "MLA_SCRIPT"]


class _Block(nnx.Module):
  """One pre-LN block."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.ln1 = nnx.LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
    self.ln2 = nnx.LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
    enc = cfg.encoding
    self.attn = _ATTENTION[cfg.attention](cfg, rngs)
    self.ff1 = torch_linear(cfg.d_model, cfg.d_ff, rngs=rngs,
                            init_scheme=cfg.init)
    self.ff2 = torch_linear(cfg.d_ff, cfg.d_model, rngs=rngs,
                            init_scheme=cfg.init)
    pe_params = enc.layer_params(cfg, rngs.params)
    self.pe_param_names = tuple(pe_params)
    for name, value in pe_params.items():
      setattr(self, name, nnx.Param(value))

  def pe_params(self) -> dict:
    """This layer's PE parameters ``{name: array}`` (the registry's hooks take them)."""
    return {name: getattr(self, name)[...] for name in self.pe_param_names}

  def bias(self, seq_len: int, positions=None) -> Optional[jax.Array]:
    """Additive logit bias ``[heads, seq, seq]`` of this layer, or None.
    ``positions``: the tokens' positions when they are not ``0..seq-1``
    (randomized positions); a NumPy array means the plain ones."""
    if not _drawn(positions):
      return self.cfg.encoding.bias(self.cfg, self.pe_params(), seq_len)
    return self.cfg.encoding.bias(self.cfg, self.pe_params(), seq_len, positions=positions)

  def logit_factor(self, seq_len: int, positions=None) -> Optional[jax.Array]:
    """Multiplicative factor ``[heads, seq, seq]`` on this layer's content
    logits, or None (``positions``: as for :meth:`bias`)."""
    if not _drawn(positions):
      return self.cfg.encoding.logit_factor(self.cfg, self.pe_params(), seq_len)
    return self.cfg.encoding.logit_factor(self.cfg, self.pe_params(), seq_len,
                                          positions=positions)

  def content_bias(self, q, k, mask, x=None) -> Optional[jax.Array]:
    """The PE's logit term from this layer's queries/keys (CoPE), or None;
    ``x``: the layer's normed input, passed on to a PE that reads it
    (``bias_reads_input``: PaTH)."""
    enc = self.cfg.encoding
    more = {"x": x} if enc.bias_reads_input else {}
    return enc.content_bias(self.cfg, self.pe_params(), q, k, mask, **more)

  def kv_input(self, h, e):
    """What keys/values are computed from: the normed residual ``h``, or the
    input embeddings ``e`` in faithful mode (the paper's quirk)."""
    return e if self.cfg.kv_from_input else h

  def head_outputs(self, x, e, *, positions, mask, key=None, freq_mask=None):
    """This block's per-head attention outputs ``[batch, seq, heads, head_dim]``
    (``freq_mask [heads, pairs]``: 0 turns that rotary pair's rotation off)."""
    h = self.ln1(x)
    bias = self.bias(x.shape[1], positions)
    enc, extra = self.cfg.encoding, {}
    bias_fn = None
    if Kind.CONTEXTUAL in enc.kinds:
      bias_fn = lambda q, k: self.content_bias(q, k, mask, x=h)
    if Kind.GATED in enc.kinds:
      gated = self.gate_bias(h, mask)
      bias = gated if bias is None else bias + gated
    if Kind.DYNAMIC in enc.kinds:  # the layer's own q/k transform (its rotation, if any)
      extra = {"qk_fn": self.qk_fn(positions, freq_mask, x=h),
               "scale": enc.logit_scale(self.cfg)}
      freq_mask = None
    return self.attn.head_outputs(h, self.kv_input(h, e), positions=positions, bias=bias,
                                  mask=mask, dropout_key=key, bias_fn=bias_fn,
                                  factor=self.logit_factor(x.shape[1], positions),
                                  freq_mask=freq_mask, **extra)

  def qk_fn(self, positions, freq_mask=None, *, x=None):
    """``(q, k) -> (q', k')``: the PE's ``layer_qk`` with this layer's
    parameters at ``positions`` (kind ``dynamic``); ``x``: the layer's normed
    input, passed on to a PE that reads it (``qk_reads_input``: CARoPE)."""
    cfg, params = self.cfg, self.pe_params()
    pos = jnp.asarray(positions)[:, None]  # broadcasts against [batch, seq, heads]
    more = {"x": x} if cfg.encoding.qk_reads_input else {}
    return lambda q, k: cfg.encoding.layer_qk(cfg, params, q, k, pos, freq_mask, **more)

  def gate_bias(self, h, mask=None):
    """The PE's bias from this layer's normed input ``h`` (kind ``gated``)."""
    return self.cfg.encoding.gate_bias(self.cfg, self.pe_params(), h, mask)

  def finish(self, x, heads_out, *, head_mask=None, keys=(None,) * 4):
    """The rest of the block after attention: ``out_proj`` of the (masked)
    head outputs, residual, feed-forward."""
    cfg, quirks = self.cfg, self.cfg.quirks
    a = self.attn.combine(heads_out, head_mask)
    if quirks.output_dropout:
      a = dropout(a, cfg.dropout, keys[1])
    x = x + a
    f = ACTIVATIONS[quirks.activation](self.ff1(self.ln2(x)))
    if quirks.hidden_dropout:
      f = dropout(f, cfg.dropout, keys[2])
    f = dropout(self.ff2(f), cfg.dropout, keys[3])
    return x + f

  def __call__(self, x, e, *, positions, mask, head_mask, key, freq_mask=None):
    keys = [None] * 4 if key is None else list(jax.random.split(key, 4))
    o = self.head_outputs(x, e, positions=positions, mask=mask, key=keys[0],
                          freq_mask=freq_mask)
    return self.finish(x, o, head_mask=head_mask, keys=keys)


def _multi_head(cfg: ModelConfig, rngs: nnx.Rngs) -> MultiHeadAttention:
  return MultiHeadAttention(
      cfg.d_model, cfg.num_heads, rope_heads=cfg.num_rope_heads,
      rotary=cfg.encoding.qk_transform(cfg),
      attn_dropout=cfg.dropout if cfg.quirks.attention_dropout else 0.0,
      init_scheme=cfg.init, query_block=cfg.attention_block,
      implementation=cfg.attention_impl, normalisation=cfg.encoding.normalisation(cfg),
      rngs=rngs)


def _latent(cfg: ModelConfig, rngs: nnx.Rngs) -> LatentAttention:
  return LatentAttention(
      cfg.d_model, cfg.num_heads, latent_dim=cfg.pe_options.latent_dim,
      rope_dim=cfg.pe_options.rope_dim,
      shared_rope_query=cfg.encoding.shared_rope_query(cfg),
      rotary=cfg.encoding.qk_transform(cfg),
      # the paper's MLA has no attention dropout (ScriptQuirks); the clean
      # model gives every PE the same regularisation
      attn_dropout=cfg.dropout if cfg.quirks.attention_dropout else 0.0,
      init_scheme=cfg.init, query_block=cfg.attention_block,
      implementation=cfg.attention_impl, rngs=rngs)


# ModelConfig.attention -> the attention module of a block
_ATTENTION = {"mha": _multi_head, "mla": _latent}


def _run_block(positions):
  """``run(block, x, e, mask, head_mask, key, freq_mask)``: one block's forward
  (``positions``: a NumPy constant, or a traced draw)."""
  def run(block, x, e, mask, head_mask, key, freq_mask):
    return block(x, e, positions=positions, mask=mask, head_mask=head_mask, key=key,
                 freq_mask=freq_mask)
  return run


def _remat_block(positions):
  """:func:`_run_block` that keeps only the block's inputs for the backward
  pass and recomputes the rest (:func:`remat.checkpoint`; with the speed layer
  off, the plain block: the reference path keeps forward mode)."""
  plain = _run_block(positions)
  if not speed.enabled():
    return plain

  def run(block, x, e, mask, head_mask, key, freq_mask):
    graphdef, state = nnx.split(block)

    def f(diff, aux):
      state, x, e, head_mask, freq_mask = diff
      mask, key, pos = aux
      return _run_block(positions if pos is None else pos)(
          nnx.merge(graphdef, state), x, e, mask, head_mask, key, freq_mask)
    aux = (mask, key, positions if _drawn(positions) else None)
    return remat.checkpoint(f)((state, x, e, head_mask, freq_mask), aux)
  return run


class TransformerClassifier(nnx.Module):
  """Sequence classifier over :class:`ModelConfig` (see module docstring)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    embed_std = 1.0 if cfg.init == "torch" else cfg.d_model ** -0.5
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model,
                           embedding_init=jax.nn.initializers.normal(embed_std),
                           rngs=rngs)
    # compute in the table's dtype, as every other layer follows its inputs and
    # parameters (nnx.Embed otherwise fixes float32 at construction): the
    # bfloat16 copy apply_model merges then runs in bfloat16
    self.embed.dtype = None
    pe_params = cfg.encoding.input_params(cfg, rngs.params, embed_std)
    self.pe_param_names = tuple(pe_params)
    for name, value in pe_params.items():
      setattr(self, name, nnx.Param(value))
    self.blocks = nnx.List([_Block(cfg, rngs=rngs)
                            for _ in range(cfg.num_layers)])
    if cfg.final_norm:
      self.final_ln = nnx.LayerNorm(cfg.d_model, epsilon=1e-5, rngs=rngs)
    self.head = torch_linear(cfg.d_model, cfg.num_classes, rngs=rngs,
                             init_scheme=cfg.init)

  def embed_inputs(self, ids: jax.Array, positions=None) -> jax.Array:
    """Token embeddings plus the input PE, ``[batch, seq, d_model]``
    (``positions``: see :meth:`_Block.bias`)."""
    cfg = self.cfg
    seq_len = ids.shape[1]
    e = self.embed(ids)
    params = {name: getattr(self, name)[...] for name in self.pe_param_names}
    if not _drawn(positions):
      table = cfg.encoding.input_table(cfg, params, seq_len)
    else:
      table = cfg.encoding.input_table(cfg, params, seq_len, positions=positions)
    # a float32 table (built from constants) keeps a bfloat16 stream bfloat16
    return e if table is None else (e + table).astype(e.dtype)

  def attention_mask(self, ids: jax.Array) -> Optional[jax.Array]:
    """Boolean ``[batch, 1, q, k]`` mask (None if nothing is masked)."""
    cfg = self.cfg
    seq_len = ids.shape[1]
    mask = None
    if cfg.mask_padding:
      mask = (ids != PAD_ID)[:, None, None, :]
    if cfg.causal:
      causal = jnp.tril(jnp.ones((seq_len, seq_len), bool))[None, None]
      mask = causal if mask is None else mask & causal
    return mask

  def __call__(self, ids: jax.Array, *, dropout_key: Optional[jax.Array] = None,
               head_mask: Optional[jax.Array] = None,
               position_key: Optional[jax.Array] = None,
               freq_mask: Optional[jax.Array] = None) -> jax.Array:
    """Class logits ``[batch, num_classes]``.

    Args:
      ids: int ``[batch, seq]`` token ids, 0 = padding, ``seq <= max_len``.
      dropout_key: PRNG key enabling dropout (training); None = deterministic.
      head_mask: ``[num_layers, num_heads]`` output factors (1 keep, 0 ablate).
      freq_mask: ``[num_layers, num_heads, head_dim/2]``: 1 keeps a rotary
        pair's rotation, 0 sets its angle to 0 (θ_k -> 0; rotary PEs in
        standard attention only).
      position_key: PRNG key of the randomized positions (``random_positions``
        only; default: derived from ``dropout_key`` in training, a fixed key
        in evaluation).
    """
    return self.forward(ids, dropout_key=dropout_key, head_mask=head_mask,
                        position_key=position_key, freq_mask=freq_mask)[0]

  def forward(self, ids: jax.Array, *, dropout_key: Optional[jax.Array] = None,
              head_mask: Optional[jax.Array] = None, input_pe: bool = True,
              position_key: Optional[jax.Array] = None,
              freq_mask: Optional[jax.Array] = None):
    """``(logits, e, layer_inputs)``: also the input embeddings ``e`` and each
    block's input residual stream (for analysis). ``input_pe=False`` drops the
    input positional table (the content-only counterpart used by
    ``decompose.py``); biases and rotations are unaffected.
    """
    cfg = self.cfg
    chex.assert_rank(ids, 2)
    check_token_ids(ids, cfg.vocab_size)
    if head_mask is not None:
      chex.assert_shape(head_mask, (cfg.num_layers, cfg.num_heads))
    if freq_mask is not None:
      check_freq_mask(cfg, freq_mask)
    ctx = self.context(ids, dropout_key=dropout_key, position_key=position_key)
    e = self.embed_inputs(ids, ctx["positions"]) if input_pe else self.embed(ids)
    x = e
    inputs = []
    run = _remat_block(ctx["positions"]) if cfg.remat else _run_block(ctx["positions"])
    for i, block in enumerate(self.blocks):
      inputs.append(x)
      key = None if dropout_key is None else jax.random.fold_in(dropout_key, i)
      x = run(block, x, e, ctx["mask"], None if head_mask is None else head_mask[i], key,
              None if freq_mask is None else freq_mask[i])
    return self.classify(x, ids), e, inputs

  def context(self, ids: jax.Array, *, dropout_key=None, position_key=None) -> dict:
    """What every block needs besides its input: ``positions`` and ``mask``.

    Positions are the NumPy constants ``0..n-1`` (XLA folds every table built
    from them), or with ``random_positions`` a sorted random draw
    (:func:`positional.random_positions`) from ``position_key``, else from
    ``dropout_key`` (training), else from a fixed key (evaluation)."""
    n = ids.shape[1]
    positions = np.arange(n)
    if self.cfg.random_positions is not None:
      if position_key is None:
        position_key = (jax.random.key(0) if dropout_key is None
                        else jax.random.fold_in(dropout_key, 0x9E3779B))
      positions = positional.random_positions(position_key, n, self.cfg.random_positions)
    return {"positions": positions, "mask": self.attention_mask(ids)}

  def classify(self, x: jax.Array, ids: jax.Array) -> jax.Array:
    """Class logits from the last residual stream: final norm, pooling, head
    (``per_token``: the head at every position, no pooling)."""
    cfg = self.cfg
    if cfg.final_norm:
      x = self.final_ln(x)
    if cfg.per_token:
      return self.head(x)
    if cfg.mask_padding:
      real = (ids != PAD_ID).astype(x.dtype)[..., None]
      pooled = (x * real).sum(1) / jnp.maximum(real.sum(1), 1.0)
    else:
      pooled = x.mean(1)
    return self.head(pooled)


def frequency_count(cfg: ModelConfig) -> int:
  """Frequencies per head that a frequency mask switches: RoPE's pairs
  (``head_dim/2``) on rotary heads, a ``dynamic`` PE's own count (PoPE: one
  per channel), else 0."""
  if Kind.DYNAMIC in cfg.encoding.kinds:
    return cfg.encoding.frequency_count(cfg)
  if cfg.num_rope_heads == 0 or cfg.rotary_frequencies() is None:
    return 0
  return cfg.head_dim // 2


def mask_frequencies(cfg: ModelConfig) -> Optional[np.ndarray]:
  """The ``[frequency_count]`` frequencies a frequency mask switches (a
  ``dynamic`` PE's initial ones where they are trained), or None."""
  if Kind.DYNAMIC in cfg.encoding.kinds:
    return cfg.encoding.frequencies(cfg)
  return cfg.rotary_frequencies()


def check_freq_mask(cfg: ModelConfig, freq_mask) -> None:
  """Raises ``ValueError`` unless ``freq_mask`` can switch off ``cfg``'s
  rotary pairs: a rotary PE in standard attention, shape
  ``[num_layers, num_heads, head_dim/2]``."""
  count = frequency_count(cfg)
  if not count and Kind.DYNAMIC in cfg.encoding.kinds:
    raise ValueError(f"frequency masks switch single frequencies; pe={cfg.pe!r} declares "
                     f"none a mask can switch (frequency_count 0)")
  if not count:
    raise ValueError(f"frequency masks need a rotation on standard attention heads; "
                     f"pe={cfg.pe!r} has none")
  want = (cfg.num_layers, cfg.num_heads, count)
  if tuple(jnp.shape(freq_mask)) != want:
    raise ValueError(f"freq_mask must be [layers, heads, head_dim/2] = {list(want)}, got "
                     f"{list(jnp.shape(freq_mask))}")


def check_token_ids(ids, vocab_size: int) -> None:
  """Raises ``ValueError`` if concrete ``ids`` leave ``[0, vocab_size)``.

  An out-of-range id would otherwise be clamped by the embedding gather without
  a word. Traced ids (inside ``jit``/``vmap``) cannot be inspected and pass:
  the runner checks the whole dataset once before training.
  """
  if isinstance(ids, jax.core.Tracer):
    return
  if not jnp.issubdtype(jnp.asarray(ids).dtype, jnp.integer):
    raise ValueError(f"token ids must be integers, got dtype {jnp.asarray(ids).dtype}")
  try:
    lo, hi = int(np.min(ids)), int(np.max(ids))
  except jax.errors.ConcretizationTypeError:  # staged inside a loop/transform
    return
  if lo < 0 or hi >= vocab_size:
    raise ValueError(f"token ids must be in [0, vocab_size={vocab_size}), got "
                     f"values in [{lo}, {hi}]")


def init_model(cfg: ModelConfig, key: jax.Array):
  """Returns ``(graphdef, params)``; ``params`` is a pure dict of arrays.

  Works under ``jax.vmap`` over ``key`` (one parameter set per seed).
  """
  graphdef, state = nnx.split(TransformerClassifier(cfg, rngs=nnx.Rngs(key)))
  return graphdef, nnx.to_pure_dict(state)


def cast_floating(tree, dtype):
  """``tree`` with its floating arrays in ``dtype`` (integers untouched)."""
  return jax.tree.map(
      lambda x: x.astype(dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x,
      tree)


def apply_model(graphdef, params, ids, *, dropout_key=None, head_mask=None,
                position_key=None, freq_mask=None):
  """Pure forward pass: ``nnx.merge`` then call (for jit/vmap/grad). With
  ``ModelConfig.dtype="bfloat16"`` the model runs on a bfloat16 copy of
  ``params`` (gradients still reach the float32 ones) and returns float32
  logits."""
  model = merge_for_compute(graphdef, params)
  logits = model(ids, dropout_key=dropout_key, head_mask=head_mask,
                 position_key=position_key, freq_mask=freq_mask)
  return logits.astype(jnp.float32)  # the identity in float32


def merge_for_compute(graphdef, params) -> "TransformerClassifier":
  """The model on ``params`` in its compute dtype (``ModelConfig.dtype``): a
  bfloat16 copy of them in bfloat16 mode, ``params`` themselves in float32
  (an exact path, as ``nnx.merge`` of float32 parameters always is)."""
  model = nnx.merge(graphdef, params)
  dtype = model.cfg.compute_dtype
  if dtype != jnp.float32:
    model = nnx.merge(graphdef, cast_floating(params, dtype))
  return model

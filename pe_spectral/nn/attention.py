"""Attention kernels (pure functions) and thin Flax NNX attention modules.

The kernel :func:`attention` is a plain ``jnp`` function: it works under
``jit``, ``vmap`` over the batch, and ``vmap`` over the head axis (a kernel
written for one head and lifted with ``jax.vmap(..., in_axes=2, out_axes=2)``
gives the same result). The modules hold parameters only; all positional logic
comes from :mod:`pe_spectral.pe.positional`.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import chex
import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from pe_spectral.nn import rng
from pe_spectral.nn.linear import torch_linear
from pe_spectral.pe import positional
from pe_spectral.runtime import speed

__all__ = ["attention", "blockwise_attention", "library_attention", "LIBRARY_IMPLEMENTATIONS",
           "attention_logits", "softmax_probs", "dropout", "masked_softmax",
           "MultiHeadAttention", "LatentAttention",
           "NORMALISATIONS", "stick_breaking_weights", "attention_weights"]

# Large finite negative: masked logits never produce NaN, even for a row whose
# keys are all masked (such a row attends uniformly, and callers never pool it).
_MASK_VALUE = -1e30

# The values of ``attention(..., implementation=)`` that call
# ``jax.nn.dot_product_attention``, and the ``implementation`` each passes it
# (``"jax"``: None, JAX's own choice; today that is XLA).
LIBRARY_IMPLEMENTATIONS = {"jax": None, "xla": "xla", "cudnn": "cudnn"}


def dropout(x: jax.Array, rate: float, key: Optional[jax.Array]) -> jax.Array:
  """Inverted dropout with an explicit key; identity if ``key`` is None or rate 0."""
  if key is None or rate == 0.0:
    return x
  if speed.enabled():
    keep = rng.bernoulli(key, 1.0 - rate, x.shape)  # == jax.random.bernoulli, faster
  else:
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return _drop(x, keep, rate)


def _drop(x, keep, rate):
  """Inverted dropout by a given ``keep`` mask (None: identity)."""
  return x if keep is None else jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


def attention_logits(q: jax.Array, k: jax.Array, *,
                     bias: Optional[jax.Array] = None,
                     scale: Optional[float] = None,
                     factor: Optional[jax.Array] = None) -> jax.Array:
  """Scaled logits ``[batch, heads, q, k]`` = ``(q k^T * scale) ∘ factor + bias``
  (pre-mask; ``factor``: a multiplicative coupling such as a decay
  ``ρ^{|i-j|}``, broadcastable to the logits)."""
  if scale is None:
    scale = 1.0 / math.sqrt(q.shape[-1])
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
  if factor is not None:
    logits = logits * factor
  if bias is not None:
    logits = logits + bias
  return logits


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *,
              bias: Optional[jax.Array] = None,
              mask: Optional[jax.Array] = None,
              head_mask: Optional[jax.Array] = None,
              scale: Optional[float] = None,
              dropout_rate: float = 0.0,
              dropout_key: Optional[jax.Array] = None,
              factor: Optional[jax.Array] = None,
              query_block: Optional[int] = None,
              implementation: Optional[str] = None,
              normalisation: str = "softmax") -> jax.Array:
  """Softmax attention (or stick-breaking: ``normalisation``).

  Differentiated by a hand-written VJP (:func:`_attend`; the gradient of plain
  autodiff up to float rounding, tested) that is cheaper on CPU: the softmax
  backward uses ``rowsum(dO * O)`` instead of a pass over the ``[q, k]``
  probabilities, the probabilities are the only ``[q, k]``-sized tensor kept
  for the backward pass (the dropout mask is recomputed from its key), the
  einsums run head-major so XLA transposes the small ``[b, h, t, d]`` operands
  rather than ``[b, h, q, k]`` ones, and the logit scale is folded into ``q``
  (exact when ``scale`` is a power of two, e.g. head_dim 16 or 64). Being a
  ``jax.custom_vjp``, it supports reverse mode (``grad``, ``vjp``) but not
  forward mode (``jvp``, ``jacfwd``); :func:`add_bias` likewise.

  Args:
    q: ``[batch, q_len, heads, d_qk]``.
    k: ``[batch, k_len, heads, d_qk]``.
    v: ``[batch, k_len, heads, d_v]`` (``d_v`` may differ from ``d_qk``).
    bias: additive logit bias broadcastable to ``[batch, heads, q_len, k_len]``.
    mask: boolean, broadcastable to ``[batch, heads, q_len, k_len]``; True = attend.
    head_mask: ``[heads]`` factors on each head's output (1 keep, 0 ablate).
    scale: logit scale; default ``1/sqrt(d_qk)``.
    dropout_rate: dropout on the attention probabilities (needs ``dropout_key``).
    dropout_key: PRNG key for that dropout; None disables it.
    factor: multiplicative factor on the content logits ``q k^T * scale``
      (before ``bias`` is added), broadcastable to ``[batch, heads, q, k]``:
      a multiplicative positional coupling (e.g. ``ρ^{|i-j|}``); None = 1.
    query_block: None (default): the kernel above. An int: the blockwise
      kernel (:func:`blockwise_attention`), which keeps no ``[q, k]``-sized
      tensor for the backward pass and builds one only ``query_block`` query
      rows at a time; same numbers up to float rounding. Like the kernel
      above it is a speed-layer piece: under :func:`speed.reference` the plain
      autodiff path runs instead.
    implementation: None (default): the kernels above. ``"jax"``, ``"xla"``
      or ``"cudnn"``: :func:`library_attention`, i.e.
      ``jax.nn.dot_product_attention`` (cuDNN's fused flash attention on a
      GPU with ``"cudnn"``). It computes ``softmax(q k^T * scale + bias)``
      only: a ``factor``, dropout on the probabilities and ``query_block``
      are refused (ValueError), never dropped silently.
    normalisation: ``"softmax"`` (default), or stick-breaking weights
      (:func:`stick_breaking_weights`; ``"stickbreaking_current"`` lets a
      query take a share of its own value): computed by plain autodiff,
      without the kernels above (``query_block`` and ``implementation``
      refused).

  Returns:
    ``[batch, q_len, heads, d_v]``.
  """
  chex.assert_rank([q, k, v], 4)
  chex.assert_equal_shape_prefix([k, v], 3)
  chex.assert_axis_dimension(k, 3, q.shape[3])
  chex.assert_axis_dimension(k, 0, q.shape[0])
  chex.assert_axis_dimension(k, 2, q.shape[2])
  if scale is None:
    scale = 1.0 / math.sqrt(q.shape[-1])
  if normalisation != "softmax":
    if implementation is not None or query_block is not None:
      raise ValueError(f"normalisation={normalisation!r} runs on the plain path only, not "
                       f"with implementation={implementation!r} or query_block={query_block}")
    logits = attention_logits(q * scale, k, bias=bias, scale=1.0, factor=factor)
    out = _weigh(attention_weights(logits, mask, v.dtype, normalisation), v, dropout_rate,
                 dropout_key)
  elif implementation is not None:
    if query_block is not None:
      raise ValueError(f"implementation={implementation!r} and query_block={query_block} "
                       f"exclude each other (the blockwise kernel is the project's own)")
    if factor is not None:
      raise ValueError(f"implementation={implementation!r} (jax.nn.dot_product_attention) "
                       f"has no multiplicative logit factor; use implementation=None")
    if dropout_key is not None and dropout_rate > 0:
      raise ValueError(f"implementation={implementation!r} (jax.nn.dot_product_attention) "
                       f"has no dropout on the attention probabilities (rate "
                       f"{dropout_rate}); train with that dropout 0 or implementation=None")
    out = library_attention(q, k, v, bias=bias, mask=mask, scale=float(scale),
                            implementation=implementation)
  elif query_block is not None and speed.enabled():
    out = blockwise_attention(q, k, v, bias=bias, factor=factor, mask=mask,
                              dropout_key=dropout_key, scale=float(scale),
                              dropout_rate=float(dropout_rate), query_block=query_block)
  elif speed.enabled():
    out = _attend(q, k, v, bias, factor, mask, dropout_key, float(scale),
                  float(dropout_rate))
  else:  # the reference: plain autodiff (forward mode works)
    out = _attend_fwd(q, k, v, bias, factor, mask, dropout_key, float(scale),
                      float(dropout_rate))[0]
  if head_mask is not None:
    out = _mask_heads(out, head_mask)
  return out


def library_attention(q: jax.Array, k: jax.Array, v: jax.Array, *,
                      bias: Optional[jax.Array] = None,
                      mask: Optional[jax.Array] = None,
                      scale: Optional[float] = None,
                      implementation: str = "xla") -> jax.Array:
  """``softmax(q k^T * scale + bias) v`` through ``jax.nn.dot_product_attention``
  (shapes as :func:`attention`; ``implementation``: a key of
  :data:`LIBRARY_IMPLEMENTATIONS`). The library wants values as wide as the
  queries; narrower values (latent attention's ``[content | rotary]`` queries
  against content-only values) are zero-padded and the padding cut from the
  output, which leaves the result exact. Biases and masks of rank below 4 get
  leading axes, as :func:`attention` broadcasts them. ``"cudnn"`` takes
  bfloat16/float16 inputs only (a one-line ValueError otherwise) and its bias
  in that dtype."""
  if implementation not in LIBRARY_IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {', '.join(LIBRARY_IMPLEMENTATIONS)}, "
                     f"got {implementation!r}")
  chex.assert_rank([q, k, v], 4)
  if scale is None:
    scale = 1.0 / math.sqrt(q.shape[-1])
  if implementation == "cudnn":
    if q.dtype not in (jnp.bfloat16, jnp.float16):
      raise ValueError(f"implementation='cudnn' (cuDNN flash attention) takes bfloat16 or "
                       f"float16 queries, got {q.dtype}; use the bfloat16 compute dtype, or "
                       f"implementation='xla'")
    if bias is not None:  # cuDNN adds the bias in the compute dtype
      bias = bias.astype(q.dtype)
  d_v, d_qk = v.shape[-1], q.shape[-1]
  if d_v > d_qk:
    raise ValueError(f"values ({d_v}) wider than queries ({d_qk}) are not supported")
  if d_v < d_qk:
    v = jnp.pad(v, ((0, 0),) * 3 + ((0, d_qk - d_v),))
  expand = lambda x: None if x is None else x.reshape((1,) * (4 - x.ndim) + x.shape)
  out = jax.nn.dot_product_attention(q, k, v, bias=expand(bias), mask=expand(mask),
                                     scale=float(scale),
                                     implementation=LIBRARY_IMPLEMENTATIONS[implementation])
  return out[..., :d_v]


# How logits become attention weights: the row softmax, or stick-breaking
# (Tan et al. 2024), over the keys before the query only or including it.
NORMALISATIONS = ("softmax", "stickbreaking", "stickbreaking_current")


def stick_breaking_weights(logits: jax.Array, mask: Optional[jax.Array] = None, *,
                           attend_current: bool = False) -> jax.Array:
  """Stick-breaking attention weights (Tan et al. 2024, arXiv 2410.17980; the
  reference fla ``naive_stickbreaking_attn``), ``[..., q, k]`` in float32:
  ``A_ij = σ(z_ij) ∏_l (1 - σ(z_il))`` over the visible keys ``l`` after ``j``,
  visible meaning ``j < i`` (``j <= i`` with ``attend_current``) and allowed
  by ``mask``. Walking back from the query each key takes a sigmoid share of
  what the nearer keys left; a row sums to ``1 - ∏_j (1 - σ(z_ij))`` <= 1
  (the rest of the stick is dropped, as the reference's layer does). In log
  space: ``log σ(z_ij) + Σ_{l>j} log σ(-z_il)``."""
  z = logits.astype(jnp.float32)
  n_q, n_k = z.shape[-2:]
  i, j = jnp.arange(n_q)[:, None], jnp.arange(n_k)[None, :]
  visible = (j <= i) if attend_current else (j < i)
  if mask is not None:
    visible = visible & mask
  log_keep = jnp.where(visible, jax.nn.log_sigmoid(-z), 0.0)  # log(1 - β)
  after = jnp.flip(jnp.cumsum(jnp.flip(log_keep, -1), -1), -1) - log_keep  # Σ_{l>j}
  return jnp.where(visible, jnp.exp(jax.nn.log_sigmoid(z) + after), 0.0)


def attention_weights(logits, mask, dtype, normalisation: str = "softmax"):
  """Logits ``[batch, heads, q, k]`` to attention weights in ``dtype``, as
  ``normalisation`` (:data:`NORMALISATIONS`) says."""
  if normalisation == "softmax":
    return masked_softmax(logits, mask, dtype)
  if normalisation not in NORMALISATIONS:
    raise ValueError(f"normalisation must be one of {', '.join(NORMALISATIONS)}, "
                     f"got {normalisation!r}")
  return stick_breaking_weights(
      logits, mask, attend_current=normalisation == "stickbreaking_current").astype(dtype)


def softmax_probs(q, k, bias, mask, scale, dtype, factor=None):
  """Softmax probabilities ``[batch, heads, q, k]`` (float32 softmax): the one
  place where :func:`attention` turns logits ``(q k^T * scale) ∘ factor + bias``
  into probabilities (tests capture the model's real logits here)."""
  logits = attention_logits(q * scale, k, bias=bias, scale=1.0, factor=factor)
  return masked_softmax(logits, mask, dtype)


def masked_softmax(logits, mask, dtype):
  """Row softmax (in float32) of ``logits`` with the keys ``mask`` leaves out
  (False) set to a large finite negative, cast to ``dtype``: how the model turns
  its logits into attention probabilities (``decompose.attention_maps`` too)."""
  if mask is not None:
    logits = jnp.where(mask, logits, _MASK_VALUE)
  return jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _attend(q, k, v, bias, factor, mask, key, scale, rate):
  return _attend_fwd(q, k, v, bias, factor, mask, key, scale, rate)[0]


def _f32(x):
  """``x`` in float32 (the identity on float32: bit-identical there)."""
  return x if x.dtype == jnp.float32 else x.astype(jnp.float32)


def _hm(x):
  """``[batch, seq, heads, d]`` <-> ``[batch, heads, seq, d]``."""
  return x.transpose(0, 2, 1, 3)


def _weigh(p, v, rate, key):
  """The values ``v [batch, k, heads, d]`` weighted by the (dropped-out)
  attention weights ``p [batch, heads, q, k]``: ``[batch, q, heads, d]``."""
  return _hm(jnp.einsum("bhqk,bhkd->bhqd", dropout(p, rate, key), _hm(v)))


def _attend_fwd(q, k, v, bias, factor, mask, key, scale, rate):
  p = softmax_probs(q, k, bias, mask, scale, v.dtype, factor=factor)
  out = _weigh(p, v, rate, key)
  return out, (q, k, v, bias, factor, mask, key, p, out)


def _attend_bwd(scale, rate, res, d_out):
  q, k, v, bias, factor, mask, key, p, out = res
  d_out_h = _hm(d_out)
  d_v = _hm(jnp.einsum("bhqk,bhqd->bhkd", dropout(p, rate, key), d_out_h))
  # d(dropped probs), then through the dropout mask (same key: same mask).
  d_p = dropout(jnp.einsum("bhqd,bhkd->bhqk", d_out_h, _hm(v)), rate, key)
  # Softmax backward: sum_k d_p * p equals rowsum(d_out * out) (out = dropped p @ v),
  # in float32 whatever the compute dtype (bfloat16 keeps p in half the memory).
  row = jnp.einsum("bqhd,bqhd->bhq", _f32(d_out), _f32(out))[..., None]
  d_logits = _f32(p) * (_f32(d_p) - row)
  if mask is not None:
    d_logits = jnp.where(mask, d_logits, jnp.zeros_like(d_logits))
  d_bias = None if bias is None else _sum_to_shape(d_logits, bias.shape).astype(bias.dtype)
  d_factor = None
  if factor is not None:
    # unused (and removed by XLA) when the factor is a constant
    content = jnp.einsum("bqhd,bkhd->bhqk", q * scale, k)
    d_factor = _sum_to_shape(d_logits * content, factor.shape).astype(factor.dtype)
    d_logits = d_logits * factor
  d_logits = d_logits.astype(q.dtype)  # the matmuls run in the compute dtype
  d_q = _hm(jnp.einsum("bhqk,bhkd->bhqd", d_logits, _hm(k))) * scale
  d_k = _hm(jnp.einsum("bhqk,bhqd->bhkd", d_logits, _hm(q * scale)))
  return (d_q.astype(q.dtype), d_k.astype(k.dtype), d_v.astype(v.dtype), d_bias, d_factor,
          None, None)


_attend.defvjp(_attend_fwd, _attend_bwd)


# ----------------------------------------------------------------------------
# The blockwise kernel: nothing [q, k]-sized kept for the backward pass.
# ----------------------------------------------------------------------------

def blockwise_attention(q, k, v, *, bias=None, factor=None, mask=None, dropout_key=None,
                        scale: float, dropout_rate: float = 0.0,
                        query_block: int) -> jax.Array:
  """:func:`attention`'s softmax attention (same arguments, already checked),
  computed ``query_block`` query rows at a time.

  The forward pass keeps the output and each query row's logsumexp; the
  backward pass recomputes each block's probabilities from them, and its
  dropout mask from the key (:func:`rng.bernoulli_rows`: the very bits of the
  whole-array mask). So the largest ``[q, k]``-shaped temporary is one block's
  ``[batch, heads, query_block, k_len]``, and none outlives its block. Every
  key is seen at once (exact row softmax, no online rescaling): the tasks'
  sequences are short, and memory is dominated by the number of query rows.
  ``q_len`` need not be a multiple of ``query_block`` (the last block is padded
  and its extra rows dropped). Outside differentiation (evaluation) it runs
  the standard one-shot forward: nothing has to be kept then."""
  if int(query_block) < 1:
    raise ValueError(f"query_block must be >= 1, got {query_block}")
  return _blockwise(q, k, v, bias, factor, mask, dropout_key, float(scale),
                    float(dropout_rate), int(query_block))


def _rank4(x):
  return None if x is None else jnp.reshape(x, (1,) * (4 - x.ndim) + x.shape)


def _rows(x, i, block):
  """Query rows ``[i*block, (i+1)*block)`` (axis 2) of a padded ``[., ., q|1, .]``
  operand; one broadcast along queries is returned whole."""
  if x is None or x.shape[2] == 1:
    return x
  return lax.dynamic_slice_in_dim(x, i * block, block, axis=2)


def _pad_rows(x, padded: int, axis: int):
  """``x`` zero-padded along ``axis`` to ``padded`` (unless broadcast, size 1)."""
  if x is None or x.shape[axis] in (1, padded):
    return x
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, padded - x.shape[axis])
  return jnp.pad(x, pad)


def _block_logits(q_i, k_h, bias_i, factor_i, mask_i, scale):
  """One block's content logits and (masked, float32) logits ``[b, h, block, k]``."""
  content = jnp.einsum("bhqd,bhkd->bhqk", q_i * scale, k_h)
  logits = content if factor_i is None else content * factor_i
  if bias_i is not None:
    logits = logits + bias_i
  if mask_i is not None:
    logits = jnp.where(mask_i, logits, _MASK_VALUE)
  return content, logits.astype(jnp.float32)


def _block_keep(key, rate, full_shape, i, block):
  """Block ``i``'s dropout mask (None without dropout)."""
  if key is None or rate == 0.0:
    return None
  return rng.bernoulli_rows(key, 1.0 - rate, full_shape, 2, i * block, block)


def _blockwise_prepare(q, bias, factor, mask, block):
  """Head-major padded operands and the block count."""
  n_q = q.shape[1]
  n_blocks = -(-n_q // block)
  padded = n_blocks * block
  q_h = _pad_rows(_hm(q), padded, 2)
  ops = [_pad_rows(_rank4(x), padded, 2) for x in (bias, factor, mask)]
  return q_h, ops, n_blocks, padded


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9))
def _blockwise(q, k, v, bias, factor, mask, key, scale, rate, block):
  # Not differentiated (evaluation): nothing is kept for a backward pass, and
  # the one-shot kernel needs less memory than the blocks' loop on XLA:CPU
  # (benchmarks/README.md) and gives the standard kernel's very numbers.
  del block
  return _attend_fwd(q, k, v, bias, factor, mask, key, scale, rate)[0]


def _blockwise_fwd(q, k, v, bias, factor, mask, key, scale, rate, block):
  b, n_q, h, _ = q.shape
  n_k = k.shape[1]
  q_h, (bias4, factor4, mask4), n_blocks, padded = _blockwise_prepare(
      q, bias, factor, mask, block)
  k_h, v_h = _hm(k), _hm(v)
  full = (b, h, n_q, n_k)

  def one(i):
    _, logits = _block_logits(_rows(q_h, i, block), k_h, _rows(bias4, i, block),
                              _rows(factor4, i, block), _rows(mask4, i, block), scale)
    lse = jax.nn.logsumexp(logits, axis=-1)
    p = jnp.exp(logits - lse[..., None]).astype(v.dtype)
    keep = _block_keep(key, rate, full, i, block)
    return jnp.einsum("bhqk,bhkd->bhqd", _drop(p, keep, rate), v_h), lse

  out_b, lse_b = lax.map(one, jnp.arange(n_blocks))  # [n, b, h, block, .]
  out = jnp.moveaxis(out_b, 0, 2).reshape(b, h, padded, -1)[:, :, :n_q]
  lse = jnp.moveaxis(lse_b, 0, 2).reshape(b, h, padded)
  out = _hm(out)
  return out, (q, k, v, bias, factor, mask, key, out, lse)


def _blockwise_bwd(scale, rate, block, res, d_out):
  q, k, v, bias, factor, mask, key, out, lse = res
  b, n_q, h, _ = q.shape
  n_k = k.shape[1]
  q_h, (bias4, factor4, mask4), n_blocks, padded = _blockwise_prepare(
      q, bias, factor, mask, block)
  k_h, v_h = _hm(k), _hm(v)
  d_out_h = _pad_rows(_hm(d_out), padded, 2)
  # softmax backward's row term rowsum(dO * O), as in _attend_bwd
  row_all = _pad_rows(jnp.einsum("bqhd,bqhd->bhq", _f32(d_out), _f32(out)), padded, 2)
  full = (b, h, n_q, n_k)
  per_row = lambda x: x is not None and x.shape[2] != 1  # stacked per block, else summed

  def one(carry, i):
    d_k, d_v, d_bias_acc, d_factor_acc = carry
    q_i = _rows(q_h, i, block)
    bias_i, factor_i, mask_i = (_rows(x, i, block) for x in (bias4, factor4, mask4))
    content, logits = _block_logits(q_i, k_h, bias_i, factor_i, mask_i, scale)
    lse_i = lax.dynamic_slice_in_dim(lse, i * block, block, axis=2)
    p = jnp.exp(logits - lse_i[..., None]).astype(v.dtype)
    keep = _block_keep(key, rate, full, i, block)
    d_out_i = lax.dynamic_slice_in_dim(d_out_h, i * block, block, axis=2)
    d_v = d_v + _f32(jnp.einsum("bhqk,bhqd->bhkd", _drop(p, keep, rate), d_out_i))
    d_p = _drop(jnp.einsum("bhqd,bhkd->bhqk", d_out_i, v_h), keep, rate)
    row = lax.dynamic_slice_in_dim(row_all, i * block, block, axis=2)[..., None]
    d_logits = _f32(p) * (_f32(d_p) - row)  # float32, as in _attend_bwd
    if mask_i is not None:
      d_logits = jnp.where(mask_i, d_logits, jnp.zeros_like(d_logits))
    d_bias_i = d_factor_i = None
    if bias4 is not None:
      d_bias_i = _sum_to_shape(d_logits, bias_i.shape)
      if not per_row(bias4):
        d_bias_acc, d_bias_i = d_bias_acc + d_bias_i, None
    if factor4 is not None:
      d_factor_i = _sum_to_shape(d_logits * content, factor_i.shape)
      if not per_row(factor4):
        d_factor_acc, d_factor_i = d_factor_acc + d_factor_i, None
      d_logits = d_logits * factor_i
    d_logits = d_logits.astype(q.dtype)
    d_q_i = jnp.einsum("bhqk,bhkd->bhqd", d_logits, k_h) * scale
    d_k = d_k + _f32(jnp.einsum("bhqk,bhqd->bhkd", d_logits, q_i * scale))
    return (d_k, d_v, d_bias_acc, d_factor_acc), (d_q_i, d_bias_i, d_factor_i)

  zeros = lambda x: None if x is None or per_row(x) else jnp.zeros(x.shape, jnp.float32)
  # d_k, d_v accumulate over blocks in float32 (cast once at the end)
  init = (jnp.zeros(k_h.shape, jnp.float32), jnp.zeros(v_h.shape, jnp.float32),
          zeros(bias4), zeros(factor4))
  (d_k, d_v, d_bias_acc, d_factor_acc), (d_q_b, d_bias_b, d_factor_b) = lax.scan(
      one, init, jnp.arange(n_blocks))

  def unstack(x_b):  # [n, b', h', block, k] -> [b', h', q, k]
    x = jnp.moveaxis(x_b, 0, 2)
    return x.reshape(x.shape[:2] + (padded,) + x.shape[4:])[:, :, :n_q]

  d_q = _hm(unstack(d_q_b))
  d_bias = d_factor = None
  if bias is not None:
    d_bias = (unstack(d_bias_b) if per_row(bias4) else d_bias_acc).reshape(bias.shape)
    d_bias = d_bias.astype(bias.dtype)
  if factor is not None:
    d_factor = (unstack(d_factor_b) if per_row(factor4) else d_factor_acc)
    d_factor = d_factor.reshape(factor.shape).astype(factor.dtype)
  return (d_q.astype(q.dtype), _hm(d_k).astype(k.dtype), _hm(d_v).astype(v.dtype), d_bias,
          d_factor, None, None)


_blockwise.defvjp(_blockwise_fwd, _blockwise_bwd)


def _sum_to_shape(x: jax.Array, shape) -> jax.Array:
  """Sums ``x`` over the axes along which an array of ``shape`` was broadcast."""
  lead = x.ndim - len(shape)
  x = x.sum(axis=tuple(range(lead))) if lead else x
  axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
  return (x.sum(axis=axes, keepdims=True) if axes else x).reshape(shape)


def _mask_heads(out: jax.Array, head_mask: jax.Array) -> jax.Array:
  """``out [batch, seq, heads, d]`` with head h scaled by ``head_mask[h]``."""
  chex.assert_shape(head_mask, (out.shape[2],))
  return out * head_mask.astype(out.dtype)[:, None]


class MultiHeadAttention(nnx.Module):
  """Multi-head attention; a q/k transform on the first ``rope_heads`` heads.

  Queries come from ``x_q`` and keys/values from ``x_kv`` (the same array for
  self-attention; the paper's model uses the input embeddings for ``x_kv``).
  ``rotary`` is a PE's q/k transform (``transform(q, k, positions) -> (q, k)``,
  e.g. :class:`positional.Rotation`); default: plain RoPE, base 10000.
  """

  def __init__(self, d_model: int, num_heads: int, *, rope_heads: int = 0,
               rotary=None, attn_dropout: float = 0.0,
               init_scheme: str = "torch", query_block: Optional[int] = None,
               implementation: Optional[str] = None, normalisation: str = "softmax",
               rngs: nnx.Rngs):
    self.num_heads = num_heads
    self.query_block = query_block
    self.implementation = implementation
    self.normalisation = normalisation
    self.head_dim = d_model // num_heads
    self.rope_heads = rope_heads
    self.rotary = positional.Rotation() if rotary is None else rotary
    self.attn_dropout = attn_dropout
    lin = lambda: torch_linear(d_model, d_model, rngs=rngs,
                               init_scheme=init_scheme)
    self.q_proj, self.k_proj, self.v_proj, self.out_proj = (lin(), lin(), lin(),
                                                            lin())

  def _heads(self, x):
    return x.reshape(x.shape[:-1] + (self.num_heads, self.head_dim))

  def project_qk(self, x_q, x_kv, positions, freq_mask=None):
    """Queries and keys ``[batch, seq, heads, head_dim]`` after the q/k transform.

    ``freq_mask [heads, head_dim/2]``: where 0, that pair of that head keeps its
    unrotated value (its angle set to 0); 1 rotates as usual."""
    q = self._heads(self.q_proj(x_q))
    k = self._heads(self.k_proj(x_kv))
    if self.rope_heads > 0:
      pos = positions[:, None]  # broadcasts against [batch, seq, heads]
      q_rot, k_rot = self.rotary(q, k, pos)
      # float32 tables keep bfloat16 queries/keys bfloat16 (identity in float32)
      q_rot, k_rot = q_rot.astype(q.dtype), k_rot.astype(k.dtype)
      if self.rope_heads < self.num_heads:
        # where() keeps heads >= rope_heads bit-identical to the unrotated ones.
        rotated = (jnp.arange(self.num_heads) < self.rope_heads)[:, None]
        q_rot = jnp.where(rotated, q_rot, q)
        k_rot = jnp.where(rotated, k_rot, k)
      if freq_mask is not None:  # pairs -> channels, in the transform's layout
        keep = positional.pairs_to_channels(
            freq_mask, getattr(self.rotary, "pairing", "interleaved")).astype(bool)
        q_rot = jnp.where(keep, q_rot, q)
        k_rot = jnp.where(keep, k_rot, k)
      q, k = q_rot, k_rot
    return q, k

  def head_outputs(self, x_q, x_kv, *, positions, bias=None, mask=None,
                   dropout_key=None, bias_fn=None, factor=None, freq_mask=None,
                   qk_fn=None, scale=None):
    """Per-head attention outputs ``[batch, seq, heads, head_dim]`` (before ``out_proj``).

    ``bias_fn(q, k)`` adds a logit term computed from the queries and keys
    (a contextual PE such as CoPE) to ``bias``; ``factor`` multiplies the
    content logits (:func:`attention`); ``qk_fn(q, k) -> (q', k')`` is a
    PE's own transform of the projected queries and keys (PoPE,
    ``rope_learned``), ``scale`` its logit scale (default ``1/sqrt`` of
    the width of ``q'``)."""
    q, k = self.project_qk(x_q, x_kv, positions, freq_mask)
    if qk_fn is not None:
      q, k = qk_fn(q, k)
    if bias_fn is not None:
      extra = bias_fn(q, k)
      bias = extra if bias is None else bias + extra
    v = self._heads(self.v_proj(x_kv))
    return attention(q, k, v, bias=bias, mask=mask, dropout_rate=self.attn_dropout,
                     dropout_key=dropout_key, factor=factor, query_block=self.query_block,
                     implementation=self.implementation, scale=scale,
                     normalisation=self.normalisation)

  def combine(self, out, head_mask=None):
    """``out_proj`` of the (head-masked) per-head outputs."""
    if head_mask is not None:
      out = _mask_heads(out, head_mask)
    return self.out_proj(out.reshape(out.shape[:2] + (-1,)))

  # the decomposition's view: no separate rotary channel (rotation acts on whole heads)
  rotary_channel_start = None

  def decompose_qk(self, x_q, x_q_content, x_kv, x_kv_content, positions):
    """``(q_c, q_p, k_c, k_p, q_rot, k_rot)``: the unrotated queries and keys
    ``[batch, seq, heads, head_dim]`` split into their content part (from the
    content-only inputs ``*_content``, bias included) and the position part
    (the projection of the remainder: every projection is affine), and the
    model's transformed queries and keys (``logit_decomposition``)."""
    q_c = self._heads(self.q_proj(x_q_content))
    q_p = self._heads((x_q - x_q_content) @ self.q_proj.kernel[...])
    k_c = self._heads(self.k_proj(x_kv_content))
    k_p = self._heads((x_kv - x_kv_content) @ self.k_proj.kernel[...])
    q_rot, k_rot = self.project_qk(x_q, x_kv, positions)
    return q_c, q_p, k_c, k_p, q_rot, k_rot

  def __call__(self, x_q, x_kv, *, positions, bias=None, mask=None,
               head_mask=None, dropout_key=None):
    return self.combine(self.head_outputs(x_q, x_kv, positions=positions, bias=bias,
                                          mask=mask, dropout_key=dropout_key),
                        head_mask)


class LatentAttention(nnx.Module):
  """DeepSeek-style multi-head latent attention (MLA) with decoupled RoPE.

  Keys/values go through a shared latent ``c_kv = W_dkv x``; queries through
  ``c_q = W_dq x``. Each head's query/key is ``[content | rotary]``: the
  content part comes from the latents; the rotary part is a separate
  ``rope_dim`` channel -- one key shared by all heads, and either a per-head
  query (DeepSeek, the default) or one query shared by all heads (the paper).
  Logits are scaled by ``1/sqrt(head_dim + rope_dim)``. All projections are
  bias-free, as in the paper's code. ``attn_dropout`` drops attention
  probabilities like :class:`MultiHeadAttention` (the clean model uses the
  same rate for every PE; the paper's MLA has none, so faithful mode passes 0).
  ``rotary`` transforms the rotary channel (default: plain RoPE; the paper's
  model: :class:`positional.PaperMLARotation`).
  """

  def __init__(self, d_model: int, num_heads: int, *, latent_dim: int,
               rope_dim: int, shared_rope_query: bool = False,
               rotary=None, attn_dropout: float = 0.0,
               init_scheme: str = "torch", query_block: Optional[int] = None,
               implementation: Optional[str] = None, rngs: nnx.Rngs):
    self.num_heads = num_heads
    self.query_block = query_block
    self.implementation = implementation
    self.attn_dropout = attn_dropout
    self.head_dim = d_model // num_heads
    self.rope_dim = rope_dim
    self.shared_rope_query = shared_rope_query
    self.rotary = positional.Rotation() if rotary is None else rotary
    lin = lambda i, o: torch_linear(i, o, rngs=rngs, use_bias=False,
                                    init_scheme=init_scheme)
    self.dkv_proj = lin(d_model, latent_dim)
    self.uk_proj = lin(latent_dim, d_model)
    self.uv_proj = lin(latent_dim, d_model)
    self.kr_proj = lin(d_model, rope_dim)
    self.dq_proj = lin(d_model, latent_dim)
    self.uq_proj = lin(latent_dim, d_model)
    q_rope_heads = 1 if shared_rope_query else num_heads
    self.qr_proj = lin(latent_dim, q_rope_heads * rope_dim)
    self.out_proj = lin(d_model, d_model)

  def project_qk(self, x, positions, *, rotate: bool = True):
    """Queries and keys ``[batch, seq, heads, head_dim + rope_dim]``.

    ``rotate=False`` leaves the rotary channel unrotated (the θ = 0
    counterpart used by the logit decomposition); every projection is linear.
    """
    b, s, _ = x.shape
    h = self.num_heads
    c_kv = self.dkv_proj(x)
    c_q = self.dq_proj(x)
    k_c = self.uk_proj(c_kv).reshape(b, s, h, self.head_dim)
    q_c = self.uq_proj(c_q).reshape(b, s, h, self.head_dim)
    pos = positions[:, None]
    k_r = self.kr_proj(x)[:, :, None, :]
    q_r = self.qr_proj(c_q).reshape(b, s, -1, self.rope_dim)
    if rotate:
      dtype = q_r.dtype
      q_r, k_r = self.rotary(q_r, k_r, pos)
      q_r, k_r = q_r.astype(dtype), k_r.astype(dtype)
    k_r = jnp.broadcast_to(k_r, (b, s, h, self.rope_dim))
    q_r = jnp.broadcast_to(q_r, (b, s, h, self.rope_dim))
    q = jnp.concatenate([q_c, q_r], axis=-1)
    k = jnp.concatenate([k_c, k_r], axis=-1)
    return q, k

  def head_outputs(self, x, x_kv=None, *, positions, bias=None, mask=None,
                   dropout_key=None, bias_fn=None, factor=None, freq_mask=None):
    """Per-head attention outputs ``[batch, seq, heads, head_dim]`` (before
    ``out_proj``), with :class:`MultiHeadAttention`'s signature. Keys and
    values come from ``x`` itself (through the shared latent): ``x_kv``, if
    given, must be ``x``; a contextual term, a logit factor and frequency
    masks have no latent-attention form and raise."""
    if x_kv is not None and x_kv is not x:
      raise ValueError("latent attention computes keys and values from its own input")
    for name, value in (("bias_fn", bias_fn), ("factor", factor), ("freq_mask", freq_mask)):
      if value is not None:
        raise ValueError(f"latent attention does not take {name}")
    b, s, _ = x.shape
    q, k = self.project_qk(x, positions)
    v = self.uv_proj(self.dkv_proj(x)).reshape(b, s, self.num_heads,
                                               self.head_dim)
    return attention(q, k, v, bias=bias, mask=mask, dropout_rate=self.attn_dropout,
                     dropout_key=dropout_key, query_block=self.query_block,
                     implementation=self.implementation)

  def combine(self, out, head_mask=None):
    """``out_proj`` of the (head-masked) per-head outputs."""
    if head_mask is not None:
      out = _mask_heads(out, head_mask)
    return self.out_proj(out.reshape(out.shape[:2] + (-1,)))

  @property
  def rotary_channel_start(self) -> int:
    """Where each head's rotary channel starts: ``q = [content | rotary]``."""
    return self.head_dim

  def decompose_qk(self, x_q, x_q_content, x_kv, x_kv_content, positions):
    """As :meth:`MultiHeadAttention.decompose_qk` (keys from ``x_q``: the
    ``x_kv`` arguments must be the same arrays); the rotary channel is left
    unrotated in the content and position parts (θ = 0)."""
    if x_kv is not x_q or x_kv_content is not x_q_content:
      raise ValueError("latent attention computes keys and values from its own input")
    unrot = lambda x: self.project_qk(x, positions, rotate=False)
    q_c, k_c = unrot(x_q_content)
    q_p, k_p = unrot(x_q - x_q_content)  # bias-free projections: exactly the remainder
    q_rot, k_rot = self.project_qk(x_q, positions)
    return q_c, q_p, k_c, k_p, q_rot, k_rot

  def __call__(self, x, *, positions, bias=None, mask=None, head_mask=None,
               dropout_key=None):
    return self.combine(self.head_outputs(x, positions=positions, bias=bias, mask=mask,
                                          dropout_key=dropout_key), head_mask)

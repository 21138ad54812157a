"""Attention kernels (pure functions) and thin Flax NNX attention modules.

The kernel :func:`attention` is a plain ``jnp`` function: it works under
``jit``, ``vmap`` over the batch, and ``vmap`` over the head axis (a kernel
written for one head and lifted with ``jax.vmap(..., in_axes=2, out_axes=2)``
gives the same result). The modules hold parameters only; all positional logic
comes from :mod:`pe_spectral.positional`.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from pe_spectral import positional, rng, speed

__all__ = ["attention", "attention_logits", "softmax_probs", "dropout", "torch_linear_init",
           "torch_linear", "MultiHeadAttention",
           "LatentAttention"]

# Large finite negative: masked logits never produce NaN, even for a row whose
# keys are all masked (such a row attends uniformly, and callers never pool it).
_MASK_VALUE = -1e30


def dropout(x: jax.Array, rate: float, key: Optional[jax.Array]) -> jax.Array:
  """Inverted dropout with an explicit key; identity if ``key`` is None or rate 0."""
  if key is None or rate == 0.0:
    return x
  if speed.enabled():
    keep = rng.bernoulli(key, 1.0 - rate, x.shape)  # == jax.random.bernoulli, faster
  else:
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


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
              factor: Optional[jax.Array] = None) -> jax.Array:
  """Softmax attention.

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
  if speed.enabled():
    out = _attend(q, k, v, bias, factor, mask, dropout_key, float(scale),
                  float(dropout_rate))
  else:  # the reference: plain autodiff (forward mode works)
    out = _attend_fwd(q, k, v, bias, factor, mask, dropout_key, float(scale),
                      float(dropout_rate))[0]
  if head_mask is not None:
    out = _mask_heads(out, head_mask)
  return out


def softmax_probs(q, k, bias, mask, scale, dtype, factor=None):
  """Softmax probabilities ``[batch, heads, q, k]`` (float32 softmax): the one
  place where :func:`attention` turns logits ``(q k^T * scale) ∘ factor + bias``
  into probabilities (tests capture the model's real logits here)."""
  logits = attention_logits(q * scale, k, bias=bias, scale=1.0, factor=factor)
  if mask is not None:
    logits = jnp.where(mask, logits, _MASK_VALUE)
  return jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _attend(q, k, v, bias, factor, mask, key, scale, rate):
  return _attend_fwd(q, k, v, bias, factor, mask, key, scale, rate)[0]


def _hm(x):
  """``[batch, seq, heads, d]`` <-> ``[batch, heads, seq, d]``."""
  return x.transpose(0, 2, 1, 3)


def _attend_fwd(q, k, v, bias, factor, mask, key, scale, rate):
  p = softmax_probs(q, k, bias, mask, scale, v.dtype, factor=factor)
  out = _hm(jnp.einsum("bhqk,bhkd->bhqd", dropout(p, rate, key), _hm(v)))
  return out, (q, k, v, bias, factor, mask, key, p, out)


def _attend_bwd(scale, rate, res, d_out):
  q, k, v, bias, factor, mask, key, p, out = res
  d_out_h = _hm(d_out)
  d_v = _hm(jnp.einsum("bhqk,bhqd->bhkd", dropout(p, rate, key), d_out_h))
  # d(dropped probs), then through the dropout mask (same key: same mask).
  d_p = dropout(jnp.einsum("bhqd,bhkd->bhqk", d_out_h, _hm(v)), rate, key)
  # Softmax backward: sum_k d_p * p equals rowsum(d_out * out) (out = dropped p @ v).
  row = jnp.einsum("bqhd,bqhd->bhq", d_out, out)[..., None]
  d_logits = p * (d_p - row.astype(p.dtype))
  if mask is not None:
    d_logits = jnp.where(mask, d_logits, jnp.zeros_like(d_logits))
  d_bias = None if bias is None else _sum_to_shape(d_logits, bias.shape).astype(bias.dtype)
  d_factor = None
  if factor is not None:
    # unused (and removed by XLA) when the factor is a constant
    content = jnp.einsum("bqhd,bkhd->bhqk", q * scale, k)
    d_factor = _sum_to_shape(d_logits * content, factor.shape).astype(factor.dtype)
    d_logits = d_logits * factor
  d_q = _hm(jnp.einsum("bhqk,bhkd->bhqd", d_logits, _hm(k))) * scale
  d_k = _hm(jnp.einsum("bhqk,bhqd->bhkd", d_logits, _hm(q * scale)))
  return d_q, d_k, d_v, d_bias, d_factor, None, None


_attend.defvjp(_attend_fwd, _attend_bwd)


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


# ----------------------------------------------------------------------------
# Initialisers (PyTorch defaults; docs/protocol.md).
# ----------------------------------------------------------------------------

def torch_linear_init(fan_in: int):
  """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: torch.nn.Linear's weight and bias init."""
  bound = 1.0 / math.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return init


def add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
  """``y + bias`` over the last axis. With the speed layer on
  (:mod:`pe_spectral.speed`) the bias gradient is a matrix-vector product:
  autodiff's equivalent sum over all leading axes becomes a reduce-window on
  XLA:CPU, ~7x slower for a ``[64, 128, 256]`` gradient, and there is one per
  linear layer."""
  return _add_bias_fast(y, bias) if speed.enabled() else y + bias


@jax.custom_vjp
def _add_bias_fast(y: jax.Array, bias: jax.Array) -> jax.Array:
  return y + bias


def _add_bias_fwd(y, bias):
  return y + bias, None


def _add_bias_bwd(_, d_y):
  rows = d_y.reshape(-1, d_y.shape[-1])
  return d_y, jnp.ones((rows.shape[0],), rows.dtype) @ rows


_add_bias_fast.defvjp(_add_bias_fwd, _add_bias_bwd)


class Linear(nnx.Linear):
  """``nnx.Linear`` (same parameters, same forward) whose bias is added by
  :func:`add_bias`."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if self.bias is None:
      return super().__call__(inputs)
    inputs, kernel, bias = self.promote_dtype(
        (inputs, self.kernel[...], self.bias[...]), dtype=self.dtype)
    y = self.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())),
                         precision=self.precision)
    return add_bias(y, bias)


def torch_linear(in_features: int, out_features: int, *, rngs: nnx.Rngs,
                 use_bias: bool = True, init_scheme: str = "torch") -> nnx.Linear:
  """An ``nnx.Linear`` initialised like ``torch.nn.Linear`` (``init_scheme="torch"``).

  ``init_scheme="lecun"``: LeCun-normal kernel (std ``1/sqrt(fan_in)``), zero bias.
  """
  if init_scheme == "torch":
    init = torch_linear_init(in_features)
    return Linear(in_features, out_features, use_bias=use_bias,
                  kernel_init=init, bias_init=init, rngs=rngs)
  if init_scheme == "lecun":
    return Linear(in_features, out_features, use_bias=use_bias,
                  kernel_init=jax.nn.initializers.lecun_normal(),
                  bias_init=jax.nn.initializers.zeros, rngs=rngs)
  raise ValueError(f"unknown init_scheme {init_scheme!r}")


class MultiHeadAttention(nnx.Module):
  """Multi-head attention; a q/k transform on the first ``rope_heads`` heads.

  Queries come from ``x_q`` and keys/values from ``x_kv`` (the same array for
  self-attention; the paper's model uses the input embeddings for ``x_kv``).
  ``rotary`` is a PE's q/k transform (``transform(q, k, positions) -> (q, k)``,
  e.g. :class:`positional.Rotation`); default: plain RoPE, base 10000.
  """

  def __init__(self, d_model: int, num_heads: int, *, rope_heads: int = 0,
               rotary=None, attn_dropout: float = 0.0,
               init_scheme: str = "torch", rngs: nnx.Rngs):
    self.num_heads = num_heads
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
      if self.rope_heads < self.num_heads:
        # where() keeps heads >= rope_heads bit-identical to the unrotated ones.
        rotated = (jnp.arange(self.num_heads) < self.rope_heads)[:, None]
        q_rot = jnp.where(rotated, q_rot, q)
        k_rot = jnp.where(rotated, k_rot, k)
      if freq_mask is not None:
        keep = jnp.repeat(freq_mask, 2, axis=-1).astype(bool)  # pairs -> channels
        q_rot = jnp.where(keep, q_rot, q)
        k_rot = jnp.where(keep, k_rot, k)
      q, k = q_rot, k_rot
    return q, k

  def head_outputs(self, x_q, x_kv, *, positions, bias=None, mask=None,
                   dropout_key=None, bias_fn=None, factor=None, freq_mask=None):
    """Per-head attention outputs ``[batch, seq, heads, head_dim]`` (before ``out_proj``).

    ``bias_fn(q, k)`` adds a logit term computed from the queries and keys
    (a contextual PE such as CoPE) to ``bias``; ``factor`` multiplies the
    content logits (:func:`attention`)."""
    q, k = self.project_qk(x_q, x_kv, positions, freq_mask)
    if bias_fn is not None:
      extra = bias_fn(q, k)
      bias = extra if bias is None else bias + extra
    v = self._heads(self.v_proj(x_kv))
    return attention(q, k, v, bias=bias, mask=mask, dropout_rate=self.attn_dropout,
                     dropout_key=dropout_key, factor=factor)

  def combine(self, out, head_mask=None):
    """``out_proj`` of the (head-masked) per-head outputs."""
    if head_mask is not None:
      out = _mask_heads(out, head_mask)
    return self.out_proj(out.reshape(out.shape[:2] + (-1,)))

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
               init_scheme: str = "torch", rngs: nnx.Rngs):
    self.num_heads = num_heads
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
      q_r, k_r = self.rotary(q_r, k_r, pos)
    k_r = jnp.broadcast_to(k_r, (b, s, h, self.rope_dim))
    q_r = jnp.broadcast_to(q_r, (b, s, h, self.rope_dim))
    q = jnp.concatenate([q_c, q_r], axis=-1)
    k = jnp.concatenate([k_c, k_r], axis=-1)
    return q, k

  def head_outputs(self, x, *, positions, bias=None, mask=None,
                   dropout_key=None):
    """Per-head attention outputs ``[batch, seq, heads, head_dim]`` (before ``out_proj``)."""
    b, s, _ = x.shape
    q, k = self.project_qk(x, positions)
    v = self.uv_proj(self.dkv_proj(x)).reshape(b, s, self.num_heads,
                                               self.head_dim)
    return attention(q, k, v, bias=bias, mask=mask, dropout_rate=self.attn_dropout,
                     dropout_key=dropout_key)

  def combine(self, out, head_mask=None):
    """``out_proj`` of the (head-masked) per-head outputs."""
    if head_mask is not None:
      out = _mask_heads(out, head_mask)
    return self.out_proj(out.reshape(out.shape[:2] + (-1,)))

  def __call__(self, x, *, positions, bias=None, mask=None, head_mask=None,
               dropout_key=None):
    return self.combine(self.head_outputs(x, positions=positions, bias=bias, mask=mask,
                                          dropout_key=dropout_key), head_mask)

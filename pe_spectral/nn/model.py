"""The Transformer classifier and its configuration.

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

import dataclasses
import functools
import math
from typing import Any, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_spectral.nn import remat
from pe_spectral.nn.attention import (
  LIBRARY_IMPLEMENTATIONS,
  LatentAttention,
  MultiHeadAttention,
  dropout,
  torch_linear,
)
from pe_spectral.pe import encodings, positional
from pe_spectral.pe.base import Kind
from pe_spectral.runtime import speed

__all__ = ["ModelConfig", "TransformerClassifier", "init_model", "apply_model",
           "PAD_ID", "ScriptQuirks", "script_quirks", "attention_of", "CLEAN", "TRANS_PY",
           "MLA_SCRIPT"]

PAD_ID = 0


@dataclasses.dataclass(frozen=True)
class ScriptQuirks:
  """The paper scripts' behaviours, each by name (docs/protocol.md). The model,
  the label rule and the training budget read these, never which PE or
  attention a run has. A clean run has :data:`CLEAN`; a faithful run the
  quirks of the script that trains its PE (:func:`script_quirks`)."""
  kv_from_input: bool = False     # keys/values of every layer from the input embeddings
  mask_padding: bool = True       # padding keys masked, and pooled over real tokens only
  final_norm: bool = True         # a LayerNorm before pooling
  activation: str = "relu"        # the feed-forward non-linearity: "relu" or "gelu" (exact)
  attention_dropout: bool = True  # dropout on the attention probabilities
  output_dropout: bool = True     # dropout on the attention output
  hidden_dropout: bool = False    # dropout after the feed-forward activation
  counts_label_zero: bool = True  # examples with label 0 count in the loss and accuracy
  epochs_factor: float = 1.0      # the script's training budget against trans.py's:
  batch_factor: int = 1           #   epochs and batch size multiplied by these


CLEAN = ScriptQuirks()
# trans.py, which trains every PE of the paper but MLA
TRANS_PY = ScriptQuirks(kv_from_input=True, mask_padding=False, final_norm=False,
                        counts_label_zero=False)
# the paper's MLA script: GELU, no dropout on the attention (probabilities or
# output) but one after the activation, the label-0 examples counted, and
# 1.5x the epochs at 2x the batch
MLA_SCRIPT = ScriptQuirks(activation="gelu", attention_dropout=False, output_dropout=False,
                          hidden_dropout=True, epochs_factor=1.5, batch_factor=2)

ACTIVATIONS = {"relu": jax.nn.relu,
               "gelu": functools.partial(jax.nn.gelu, approximate=False)}


# PE kinds (base.Kind) whose logits are not softmax(q·k + bias): the
# library attention refuses them, saying what they have.
LIBRARY_REFUSES = {Kind.FACTOR: "multiplicative factor",
                   Kind.CONTEXTUAL: "term computed from the queries and keys"}


def attention_of(pe: str) -> str:
  """The attention architecture PE ``pe`` declares: ``"mla"`` (latent attention
  with a decoupled rotary channel) or ``"mha"``."""
  return "mla" if encodings.get(pe).latent_attention else "mha"


def script_quirks(faithful: bool, attention: str) -> ScriptQuirks:
  """The quirks a run gets: none when clean; when faithful, those of the
  paper's script for this attention (``"mla"``: its MLA script, else trans.py)."""
  if not faithful:
    return CLEAN
  return MLA_SCRIPT if attention == "mla" else TRANS_PY


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Static model configuration (hashable; validates itself on construction).

  Attributes:
    pe: a name in the PE registry (:func:`encodings.names`).
    vocab_size: token ids are ``0..vocab_size-1``; 0 is padding.
    num_classes: output logits (faithful mode: the paper uses ``vocab_size``).
    d_model, num_heads, num_layers, d_ff, max_len: sizes.
    dropout: dropout rate (attention probabilities, attention output, FFN).
    faithful: the paper's architecture quirks (see module docstring).
    pe_options: the PE's own options, one frozen value of the type its
      encoding declares (``encodings.PartialRopeOptions`` for
      ``partial_rope``'s head count, ``PRopeOptions``, ``XPosOptions``,
      ``AlibiOptions``, ``FireOptions``, ``CoPEOptions``, and
      ``MLAOptions`` for latent attention's widths), or a dict of its
      fields; None (default): the type's defaults. A PE without options takes
      None only. ``config.json`` records it as a nested object.
    rope_base: RoPE / sinusoid base.
    causal: causal attention mask (ALiBi then uses its causal Toeplitz form).
    relative_buckets: ``None`` = one learned scalar per clipped offset (the
      paper); an int = T5 log-buckets with that many buckets.
    relative_max_distance: clip distance (default ``max_len - 1``, i.e. every
      offset its own entry, as the paper) or the T5 ``max_distance``.
    rope_scaling, rope_scaling_factor, rope_scaling_original_len: an
      eval-time rotary context extension (``positional.ROPE_SCALINGS``:
      ``"pi"``, ``"ntk"``, ``"yarn"``, ``"yarn_turns"``, ``"llama3"``;
      :class:`positional.RopeScaling`) applied to an already-trained model by
      ``experiments.lengths``; None (default) trains and evaluates plain RoPE.
    random_positions: randomized positions (Ruoss et al. 2023): every batch,
      in training and in evaluation, the tokens get sorted distinct positions
      drawn from ``[0, random_positions)`` instead of ``0..n-1`` (for any PE
      whose hooks take positions; learned tables get that many rows). None:
      plain positions.
    init_scheme: ``"torch"`` (PyTorch defaults, as the paper: embeddings and
      a learned position table N(0, 1), linears U(±1/sqrt(fan_in))) or
      ``"lecun"`` (embeddings and learned table N(0, 1/d_model), LeCun-normal
      kernels, zero biases). Default: torch when faithful, else lecun.
    attention_block: None (default): the attention kernel that keeps each
      layer's ``[batch, heads, q, k]`` probabilities for the backward pass. An
      int: the blockwise kernel (:func:`attention.blockwise_attention`), which
      keeps none and builds them that many query rows at a time: the same
      model up to float rounding, far less memory, some recomputation.
    attention_impl: which softmax-attention code runs. None (default, also
      spelled ``"own"``): the project's kernel (or the blockwise one, with
      ``attention_block``). ``"jax"``, ``"xla"``, ``"cudnn"``:
      ``jax.nn.dot_product_attention`` with that ``implementation`` (``"jax"``
      passes None, JAX's choice; ``"cudnn"`` is cuDNN's fused flash attention
      on a GPU). It computes ``softmax(q·k * scale + bias)``, so it serves the
      PEs whose logits are that (a q/k transform, an additive bias, input
      embeddings; latent attention too) and refuses, by name, a PE with a
      multiplicative factor or a content-computed term, and
      ``attention_block``. It has no dropout on the attention probabilities:
      training such a config with that dropout is refused
      (``config.build``; :func:`attention.attention` at trace time), while
      evaluation and ablation, which drop nothing, always can use it. The
      same model up to float rounding (tested against the project's kernel).
    remat: rematerialise each block in the backward pass (only the blocks'
      inputs are kept, the rest is recomputed: :func:`remat.checkpoint`).
      None/False (default): off. Memory options, like ``attention_block``:
      neither changes what is computed beyond float rounding.
    dtype: None (default): float32 throughout. ``"bfloat16"``: mixed precision
      -- the parameters (and the optimiser) stay float32, :func:`apply_model`
      runs the forward pass on a bfloat16 copy of them (activations and the
      kept tensors in bfloat16, softmax and its backward pass in float32) and
      returns float32 logits, so losses and gradients are float32. Evaluation
      and ablation run in this dtype too (:func:`merge_for_compute`); paths
      that merge the float32 parameters themselves (``decompose``, spectra)
      compute in float32.
    pe_module: the researcher's module that registers ``pe`` (a dotted name
      or a ``.py`` path; :func:`encodings.load_module`), loaded when the
      config is built; None (default) for the package's own PEs, and then
      not recorded.
    per_token: None (default): class logits of the pooled sequence,
      ``[batch, num_classes]``. True: a language model's head, logits at every
      position ``[batch, seq, num_classes]`` (no pooling); needs ``causal``
      (each position then sees only itself and what precedes it).
  """
  pe: str = "rope"
  vocab_size: int = 574
  num_classes: int = 574
  d_model: int = 256
  num_heads: int = 16
  num_layers: int = 6
  d_ff: int = 512
  max_len: int = 128
  dropout: float = 0.1
  faithful: bool = False
  pe_options: Any = None
  rope_base: float = 10000.0
  causal: bool = False
  relative_buckets: Optional[int] = None
  relative_max_distance: Optional[int] = None
  init_scheme: Optional[str] = None
  rope_scaling: Optional[str] = None
  rope_scaling_factor: Optional[float] = None
  rope_scaling_original_len: Optional[int] = None
  random_positions: Optional[int] = None
  attention_block: Optional[int] = None
  attention_impl: Optional[str] = None
  remat: Optional[bool] = None
  dtype: Optional[str] = None
  pe_module: Optional[str] = None
  per_token: Optional[bool] = None

  def __post_init__(self):
    if self.pe_module is not None:
      encodings.load_module(self.pe_module)
    enc = encodings.get(self.pe)  # unknown name -> lists valid names
    for name in ("vocab_size", "num_classes", "d_model", "num_heads",
                 "num_layers", "d_ff", "max_len"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.d_model % self.num_heads:
      raise ValueError(
          f"d_model ({self.d_model}) must be divisible by num_heads "
          f"({self.num_heads})")
    if not (math.isfinite(self.rope_base) and self.rope_base > 0):
      raise ValueError(f"rope_base must be a finite number > 0, got {self.rope_base}")
    opts = _resolved_options(self.pe, self.pe_options)
    if opts is not None:  # defaults that depend on the sizes, filled in once
      opts = enc.complete_options(self, opts)
    object.__setattr__(self, "pe_options", opts)
    if self.random_positions is not None:
      if not enc.takes_positions:
        raise ValueError(f"random_positions needs a PE that uses positions; {self.pe!r} "
                         f"does not")
      if self.random_positions < self.max_len:
        raise ValueError(f"random_positions ({self.random_positions}) must be >= max_len "
                         f"({self.max_len})")
    if self.attention_block is not None and (isinstance(self.attention_block, bool)
                                              or self.attention_block < 1):
      raise ValueError(f"attention_block must be an int >= 1 or None, got "
                       f"{self.attention_block!r}")
    self._check_attention_impl(enc)
    if self.dtype not in (None, "bfloat16"):
      raise ValueError(f"dtype must be None (float32) or 'bfloat16', got {self.dtype!r}")
    if self.remat not in (None, True, False):
      raise ValueError(f"remat must be True, False or None, got {self.remat!r}")
    if self.rope_scaling is not None:
      if enc.qk_transform(self.replace(rope_scaling=None)) is None:
        raise ValueError(f"rope_scaling needs a rotary PE, not {self.pe!r}")
      _ = self.rope_scaling_spec  # validates kind, factor and length
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
    if self.init_scheme not in (None, "torch", "lecun"):
      raise ValueError(f"init_scheme must be 'torch' or 'lecun', got "
                       f"{self.init_scheme!r}")
    if self.relative_buckets is not None and self.relative_buckets < 2:
      raise ValueError(
          f"relative_buckets must be >= 2 or None, got {self.relative_buckets}")
    if self.relative_max_distance is not None and self.relative_max_distance < 1:
      raise ValueError("relative_max_distance must be >= 1")
    if self.per_token not in (None, True):
      raise ValueError(f"per_token must be True or None, got {self.per_token!r}")
    if self.per_token and not self.causal:
      raise ValueError("per_token logits (a language model) need causal attention: "
                       "without it each position sees the tokens it predicts")
    if self.per_token and self.faithful:
      raise ValueError("faithful mode reproduces the paper's classifier scripts; a "
                       "language model (per_token) has no faithful form")
    enc.validate(self)

  def _check_attention_impl(self, enc) -> None:
    """Validates ``attention_impl`` (``"own"`` is stored as None)."""
    impl = self.attention_impl
    if impl == "own":
      object.__setattr__(self, "attention_impl", None)
      return
    if impl is None:
      return
    if impl not in LIBRARY_IMPLEMENTATIONS:
      raise ValueError(f"attention_impl must be 'own' (or None), "
                       f"{', '.join(map(repr, LIBRARY_IMPLEMENTATIONS))}; "
                       f"got {impl!r}")
    if self.attention_block is not None:
      raise ValueError(f"attention_impl={impl!r} and attention_block exclude each other "
                       f"(the blockwise kernel is the project's own)")
    other = [k for k in enc.kinds if k in LIBRARY_REFUSES]
    if other:
      raise ValueError(f"attention_impl={impl!r} computes softmax(q·k + bias) and cannot "
                       f"run pe={self.pe!r}, whose logits have a {LIBRARY_REFUSES[other[0]]}; "
                       f"use attention_impl='own'")

  @property
  def drops_attention_probs(self) -> bool:
    """Whether training drops out attention probabilities (rate ``dropout``)."""
    return self.quirks.attention_dropout and self.dropout > 0

  @property
  def rope_scaling_spec(self) -> Optional[positional.RopeScaling]:
    """The eval-time :class:`positional.RopeScaling`, or None."""
    if self.rope_scaling is None:
      return None
    return positional.RopeScaling(
        self.rope_scaling, float(self.rope_scaling_factor or 1.0),
        int(self.rope_scaling_original_len or self.max_len))

  @property
  def compute_dtype(self):
    """The forward pass's dtype (:attr:`dtype`; parameters stay float32)."""
    return jnp.bfloat16 if self.dtype == "bfloat16" else jnp.float32

  @property
  def encoding(self) -> encodings.PositionalEncoding:
    """This config's PE: the registry object whose hooks the model calls."""
    return encodings.get(self.pe)

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  @property
  def num_rope_heads(self) -> int:
    """Heads whose q/k are transformed in a standard attention layer (0 for
    latent attention, whose rotation is a channel of its own)."""
    return self.encoding.rotary_heads(self)

  def rotary_frequencies(self):
    """The inverse frequencies ``[d/2]`` of this model's rotation (rotary heads
    or MLA's rotary channel: base, p-RoPE fraction and eval-time scaling
    applied), or None when its q/k transform is not a pure rotation. The one
    definition the model and ``decompose`` share."""
    return self.encoding.rotary_frequencies(self)

  @property
  def attention(self) -> str:
    """The attention architecture, as the PE declares it (:func:`attention_of`)."""
    return attention_of(self.pe)

  @property
  def quirks(self) -> ScriptQuirks:
    """The paper-script behaviours of this run (:func:`script_quirks`)."""
    return script_quirks(self.faithful, self.attention)

  @property
  def init(self) -> str:
    """The resolved init scheme."""
    if self.init_scheme is None:
      return "torch" if self.faithful else "lecun"
    return self.init_scheme

  @property
  def kv_from_input(self) -> bool:
    """Paper quirk: K/V of every layer come from the input embeddings."""
    return self.quirks.kv_from_input

  @property
  def mask_padding(self) -> bool:
    return self.quirks.mask_padding

  @property
  def final_norm(self) -> bool:
    return self.quirks.final_norm

  @property
  def position_range(self) -> int:
    """Positions are drawn below this: ``random_positions``, else ``max_len``."""
    return self.random_positions or self.max_len

  @property
  def relative_distance(self) -> int:
    if self.relative_max_distance is not None:
      return self.relative_max_distance
    return self.position_range - 1

  def replace(self, **kw) -> "ModelConfig":
    return dataclasses.replace(self, **kw)

  def to_dict(self) -> dict:
    """The fields that apply to this PE: every shared field, and of the
    PE-scoped ones (:data:`PE_SCOPED`) only the PE's own
    (``encoding.config_fields``), its options as a nested dict. What
    ``config.json`` records; :meth:`from_dict` rebuilds a config that
    computes the same model."""
    return _scoped(dataclasses.asdict(self))

  @classmethod
  def from_dict(cls, d: dict) -> "ModelConfig":
    """The config of a ``config.json`` ``model`` dict, of this format or an
    older one (:func:`upgrade_record`)."""
    return cls(**upgrade_record(d))


def _resolved_options(pe: str, opts):
  """``pe_options`` as stored: the PE's options type (its defaults for None,
  built from a dict of its fields), or None for a PE without options."""
  kind = encodings.get(pe).options_type
  if kind is None:
    if opts is not None:
      owners = [p for p in encodings.names() if encodings.get(p).options_type is not None]
      raise ValueError(f"pe={pe!r} has no options, got pe_options={opts!r} (PEs with "
                       f"options: {', '.join(owners)})")
    return None
  if opts is None:
    return kind()
  if isinstance(opts, dict):
    names = [f.name for f in dataclasses.fields(kind)]
    unknown = sorted(set(opts) - set(names))
    if unknown:
      raise ValueError(f"pe_options of {pe!r} ({kind.__name__}) has no field "
                       f"{', '.join(map(repr, unknown))}; its fields: {', '.join(names)}")
    return kind(**opts)
  if type(opts) is not kind:
    raise ValueError(f"pe_options of {pe!r} must be {kind.__name__} (or a dict of its "
                     f"fields), got {type(opts).__name__}")
  return opts


# Every field that applies to some PEs only: their options and what PEs read
# (``PositionalEncoding.reads``). The rest (sizes, dropout, mode, memory
# options, random positions) applies to every run.
PE_SCOPED = ("pe_options", "rope_base", "relative_buckets", "relative_max_distance",
             "rope_scaling", "rope_scaling_factor", "rope_scaling_original_len")
# Records written before the options were nested kept them as flat fields:
# old field -> its name in the PE's options type.
LEGACY_OPTIONS = {"rope_heads": "heads", "rope_fraction": "fraction",
                  "xpos_gamma": "gamma", "xpos_scale_base": "scale_base",
                  "alibi_slopes": "slopes", "fire_hidden": "hidden",
                  "cope_positions": "positions", "mla_latent_dim": "latent_dim",
                  "mla_rope_dim": "rope_dim", "mla_shared_rope_query": "shared_rope_query",
                  "mla_paper_rotary": "paper_rotary"}


def upgrade_record(d: dict) -> dict:
  """A ``config.json`` ``model`` dict in this format. Older records kept each
  PE option as a flat field (:data:`LEGACY_OPTIONS`; None meant the default,
  and the oldest listed every PE's): those of the run's PE become its
  ``pe_options``, the others (None, or partial RoPE's head count and MLA's
  widths, recorded for every PE) are dropped. A dict already in this format
  comes back equal."""
  if d.get("pe_module") is not None:  # a researcher's PE: its module registers it
    encodings.load_module(d["pe_module"])
  legacy = {k: d[k] for k in LEGACY_OPTIONS if k in d}
  if not legacy:
    return dict(d)
  out = {k: v for k, v in d.items() if k not in LEGACY_OPTIONS}
  kind = encodings.get(d["pe"]).options_type
  if kind is not None and out.get("pe_options") is None:
    names = {f.name for f in dataclasses.fields(kind)}
    opts = {LEGACY_OPTIONS[k]: v for k, v in legacy.items()
            if v is not None and LEGACY_OPTIONS[k] in names}
    out["pe_options"] = dict(sorted(opts.items())) or None
  return out


def recorded_fields(d: dict) -> dict:
  """A ModelConfig dict (``config.json``'s ``model``, of any format) without
  the PE-scoped fields its PE does not read: what :meth:`ModelConfig.to_dict`
  records. A PE's options are recorded in full (every field, the defaults
  that depend on the sizes filled in), so the record says what ran."""
  d = upgrade_record(d)
  out = _scoped(d)
  if encodings.get(d["pe"]).options_type is not None:  # in full, as to_dict writes it
    out["pe_options"] = dataclasses.asdict(ModelConfig(**d).pe_options)
  return out


def _scoped(d: dict) -> dict:
  """``d`` without the PE-scoped fields its PE does not read."""
  own = set(encodings.get(d["pe"]).config_fields)
  return {k: v for k, v in d.items() if (k not in PE_SCOPED or k in own)
          and not (k == "pe_module" and v is None)}


def _drawn(positions) -> bool:
  """Randomized positions (a traced array), as opposed to None or the plain
  NumPy ``0..n-1`` that ``context`` passes; only then do hooks get ``positions=``,
  so a PE without ``takes_positions`` never sees the argument."""
  return positions is not None and not isinstance(positions, np.ndarray)


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

  def content_bias(self, q, k, mask) -> Optional[jax.Array]:
    """The PE's logit term from this layer's queries/keys (CoPE), or None."""
    return self.cfg.encoding.content_bias(self.cfg, self.pe_params(), q, k, mask)

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
      bias_fn = lambda q, k: self.content_bias(q, k, mask)
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
      implementation=cfg.attention_impl, rngs=rngs)


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

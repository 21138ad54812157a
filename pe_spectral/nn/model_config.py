"""A model's configuration: :class:`ModelConfig` (every field a run records),
the paper scripts' behaviours by name (:class:`ScriptQuirks`), and the
upgrade of older ``config.json`` records. :mod:`pe_spectral.nn.model` builds
the Transformer from it (and re-exports these names)."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.nn.attention import LIBRARY_IMPLEMENTATIONS
from pe_spectral.pe import encodings, positional
from pe_spectral.pe.base import Kind

__all__ = ["ModelConfig", "PAD_ID", "ScriptQuirks", "script_quirks", "attention_of", "CLEAN",
           "TRANS_PY", "MLA_SCRIPT", "ACTIVATIONS", "LIBRARY_REFUSES", "PE_SCOPED",
           "LEGACY_OPTIONS", "upgrade_record", "recorded_fields"]


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
    rope_pairing: which channels a rotary PE turns together (``rope``,
      ``partial_rope``, ``rope_sinusoidal``, ``p_rope``, ``xpos``):
      ``"interleaved"`` pairs ``(2i, 2i+1)`` (the original RoPE; None, the
      default, means this) or ``"half"`` pairs ``(i, i + head_dim/2)`` (the
      rotate-half layout of GPT-NeoX, Llama and HF). A relabelling of the
      query/key channels: the same logits on q/k permuted to match.
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
  rope_pairing: Optional[str] = None
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
    mode = "causal" if self.causal else "bidirectional"
    if mode not in enc.attention:
      raise ValueError(f"pe={self.pe!r} is defined for {' and '.join(enc.attention)} "
                       f"attention only, not {mode} (causal={self.causal})")
    if self.rope_pairing is not None:
      if self.rope_pairing not in positional.PAIRINGS:
        raise ValueError(f"rope_pairing must be 'interleaved' or 'half', got "
                         f"{self.rope_pairing!r}")
      if "rope_pairing" not in enc.reads:
        readers = [p for p in encodings.names() if "rope_pairing" in encodings.get(p).reads]
        raise ValueError(f"rope_pairing applies to {', '.join(readers)}, not {self.pe!r}")
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
    if enc.normalisation(self) != "softmax":
      raise ValueError(f"attention_impl={impl!r} computes softmax(q·k + bias) and cannot "
                       f"run pe={self.pe!r}, whose weights are {enc.normalisation(self)}; "
                       f"use attention_impl='own'")
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
  def pairing(self) -> str:
    """The rotary pairs' layout: ``rope_pairing``, ``"interleaved"`` when None."""
    return self.rope_pairing or "interleaved"

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
             "rope_scaling", "rope_scaling_factor", "rope_scaling_original_len",
             "rope_pairing")
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

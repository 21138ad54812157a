"""The PE registry: each positional encoding is one object, in one place.

An encoding implements the hooks every consumer needs, and nothing outside
this module switches on a PE's name:

* ``input_params`` / ``input_table`` -- a table added to the token embeddings
  (absolute PEs);
* ``layer_params`` / ``bias`` -- a per-layer additive logit bias
  ``[heads, n, n]`` (relative, ALiBi, KERPLE, FIRE);
* ``qk_transform`` / ``rotary_heads`` -- what is done to queries and keys, and
  on how many heads (RoPE, partial RoPE, p-RoPE, xPos, MLA's rotary channel);
* ``content_bias`` -- a logit term computed from the layer's queries and keys
  (CoPE's contextual positions); it has no Toeplitz form;
* ``logit_factor`` -- a per-layer multiplicative factor ``[heads, n, n]`` on
  the content logits (``alibi_multiplicative``'s decay ``ρ^{|i-j|}``);
* ``layer_qk`` / ``logit_scale`` -- a q/k transform with the layer's PE
  parameters, which may depend on the content (PoPE's softplus magnitudes,
  ``rope_learned``'s trained frequencies);
* ``gate_bias`` -- an additive logit bias computed from the layer's input
  (``alibi_data``'s forget gates);
* ``toeplitz_coeffs`` -- the Hermitian Toeplitz coefficients of the PE's
  position matrix (the bias's symmetric part, the input table's Gram, or one
  rotary frequency's phase matrix), which feed ``spectral.toeplitz_eig_bounds``;
  ``bias_extremes`` where a closed form exists (ALiBi);
* ``validate`` -- the PE's own checks of a :class:`~pe_spectral.nn.model.ModelConfig`.

Hooks take the model config ``cfg`` and, where parameters are involved, a dict
``{name: array}`` of one layer's (or the model's) PE parameters; they are pure
``jnp`` and work under ``jit`` and ``vmap`` (over seeds, e.g.).

Adding a PE is one subclass plus :func:`register`:

>>> class Constant(PositionalEncoding):
...   name = "constant"
...   def bias(self, cfg, params, seq_len):
...     return jnp.zeros((cfg.num_heads, seq_len, seq_len))
>>> register(Constant())  # now config.build(..., pe="constant") trains
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import os
import re
import sys
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.pe import positional as P
from pe_spectral.pe import spectral

__all__ = ["PositionalEncoding", "register", "unregister", "get", "names", "load_module",
           "REGISTRY", "KINDS", "PartialRopeOptions", "PRopeOptions", "XPosOptions",
           "AlibiOptions", "FireOptions", "CoPEOptions", "MLAOptions", "PoPEOptions",
           "AlibiDataOptions", "COUPLINGS", "SHORTCUT_OPTIONS",
           "short_option", "rope_heads_option"]

REGISTRY: dict[str, "PositionalEncoding"] = {}
# The ways a PE can enter attention (``PositionalEncoding.kinds``).
KINDS = ("input", "bias", "rotary", "contextual", "factor", "dynamic", "gated")
# How a PE couples position with content (``PositionalEncoding.coupling``):
# static additive / multiplicative, the same with a position term that
# depends on the tokens, or "" (none, absolute, or neither form).
COUPLINGS = ("", "additive", "multiplicative", "content_additive", "content_multiplicative")


# --- a PE's own options ------------------------------------------------------
# Each PE with settings of its own declares them as one frozen dataclass
# (``PositionalEncoding.options_type``), validated on construction;
# ``ModelConfig.pe_options`` carries one of them (its defaults when not given)
# and ``config.json`` records it as a nested ``pe_options`` object. Checks that
# need the rest of the model (``heads <= num_heads``) stay in the PE's
# ``validate``.


def _int_field(obj, name: str, low: int, label: str = "") -> None:
  """Refuses a field of an options dataclass that is not an int >= ``low``
  (None passes: the field's default is resolved later)."""
  value = getattr(obj, name)
  if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                            or value < low):
    raise ValueError(f"{type(obj).__name__}.{name}{label} must be an int >= {low}, "
                     f"got {value!r}")


def _float_field(obj, name: str, ok: Callable[[float], bool], want: str) -> None:
  """Refuses a field that is not a real number with ``ok(value)`` (``want``
  says which); stores it as a float, so equal options hash equal."""
  value = getattr(obj, name)
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
    raise ValueError(f"{type(obj).__name__}.{name} must be {want}, got {value!r}")
  object.__setattr__(obj, name, float(value))


def _bool_field(obj, name: str) -> None:
  value = getattr(obj, name)
  if value is not None and not isinstance(value, bool):
    raise ValueError(f"{type(obj).__name__}.{name} must be True, False or None, got {value!r}")


@dataclasses.dataclass(frozen=True)
class PartialRopeOptions:
  """``partial_rope``: RoPE on the first ``heads`` heads (``0..num_heads``)."""
  heads: int = 1

  def __post_init__(self):
    _int_field(self, "heads", 0, " (rope_heads)")


@dataclasses.dataclass(frozen=True)
class PRopeOptions:
  """``p_rope``: the share of frequency pairs that rotate (the highest ones)."""
  fraction: float = 0.75

  def __post_init__(self):
    _float_field(self, "fraction", lambda f: 0.0 <= f <= 1.0, "in [0, 1]")


@dataclasses.dataclass(frozen=True)
class XPosOptions:
  """``xpos``: the per-pair decay ``γ`` and its scale base (Sun et al. 2023)."""
  gamma: float = 0.4
  scale_base: float = 512.0

  def __post_init__(self):
    for name in ("gamma", "scale_base"):
      _float_field(self, name, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


@dataclasses.dataclass(frozen=True)
class AlibiOptions:
  """``alibi``, ``alibi_multiplicative``: the slope scheme, ``"standard"``
  (Press et al., ``2^(-8h/H)``) or ``"paper"`` (``exp(-h/H)``); None: the
  mode's (paper when faithful)."""
  slopes: Optional[str] = None

  def __post_init__(self):
    if self.slopes not in (None, "standard", "paper"):
      raise ValueError(f"AlibiOptions.slopes must be 'standard' or 'paper', got "
                       f"{self.slopes!r}")


@dataclasses.dataclass(frozen=True)
class FireOptions:
  """``fire``: the width of FIRE's per-layer MLP."""
  hidden: int = 32

  def __post_init__(self):
    _int_field(self, "hidden", 1)


@dataclasses.dataclass(frozen=True)
class CoPEOptions:
  """``cope``: the number of position embeddings; None: ``max_len``
  (contextual positions are clipped below it)."""
  positions: Optional[int] = None

  def __post_init__(self):
    _int_field(self, "positions", 2)


@dataclasses.dataclass(frozen=True)
class MLAOptions:
  """``mla`` (DeepSeek-style latent attention; its options are the
  attention's): ``latent_dim``, the width of the shared key/value latent;
  ``rope_dim``, the width of the decoupled rotary channel; ``shared_rope_query``,
  one rotary query for all heads (the paper) instead of one per head;
  ``paper_rotary``, the paper's transform (not a rotation). None for a width:
  ``d_model // 2`` and the head width (the paper's ratios), filled in when the
  ``ModelConfig`` is built, so a record states the widths that ran; None for
  a switch: on in faithful mode, off in clean mode."""
  latent_dim: Optional[int] = None
  rope_dim: Optional[int] = None
  shared_rope_query: Optional[bool] = None
  paper_rotary: Optional[bool] = None

  def __post_init__(self):
    _int_field(self, "latent_dim", 1)
    _int_field(self, "rope_dim", 1)
    if self.rope_dim is not None and self.rope_dim % 2:
      raise ValueError(f"MLAOptions.rope_dim must be even, got {self.rope_dim}")
    _bool_field(self, "shared_rope_query")
    _bool_field(self, "paper_rotary")


@dataclasses.dataclass(frozen=True)
class PoPEOptions:
  """``pope``: ``learned_phase``, a trained per-layer, per-head, per-channel key
  phase bias ``δ`` (initialised at 0, kept in [-2π, 0]); False fixes ``δ = 0``."""
  learned_phase: bool = True

  def __post_init__(self):
    if not isinstance(self.learned_phase, bool):
      raise ValueError(f"PoPEOptions.learned_phase must be True or False, got "
                       f"{self.learned_phase!r}")


@dataclasses.dataclass(frozen=True)
class AlibiDataOptions:
  """``alibi_data``: ``gate_bias_init``, the forget gates' initial bias (5, as
  x-transformers: ``log σ(5) ≈ -0.0067`` per token, almost no decay at first)."""
  gate_bias_init: float = 5.0

  def __post_init__(self):
    _float_field(self, "gate_bias_init", math.isfinite, "a finite number")


# config.build()'s shortcut arguments for a PE option: argument -> (options type, field).
SHORTCUT_OPTIONS = {"rope_heads": (PartialRopeOptions, "heads"),
                    "alibi_slopes": (AlibiOptions, "slopes")}


def short_option(pe: str, argument: str) -> Optional[str]:
  """The field of ``pe``'s options that the shortcut ``argument`` sets, or
  None when ``pe`` has no such option (it is then left alone)."""
  kind, name = SHORTCUT_OPTIONS[argument]
  return name if get(pe).options_type is kind else None


def rope_heads_option(cfg) -> Optional[int]:
  """Partial RoPE's head count of a ``ModelConfig``; None for any other PE
  (what summaries and reports record as ``rope_heads``)."""
  opts = cfg.pe_options
  return opts.heads if isinstance(opts, PartialRopeOptions) else None


class PositionalEncoding:
  """A PE that does nothing (NoPE); subclasses override the hooks they need.

  Class attributes:
    name: the registry name (``config.build``'s ``pe``).
    description: one line for ``--help``, the README and reports.
    latent_attention: the model uses DeepSeek-style latent attention (MLA).
    options_type: the frozen dataclass of this PE's own options (e.g.
      :class:`XPosOptions`), or None; ``ModelConfig.pe_options`` holds one
      (options for another PE are an error), and build()'s shortcut
      arguments (``rope_heads``, ``alibi_slopes``) are routed by it
      (:data:`SHORTCUT_OPTIONS`).
    reads: the shared PE-scoped ``ModelConfig`` fields (``model.PE_SCOPED``)
      this PE reads, e.g. ``rope_base``; with ``pe_options`` they make
      :attr:`config_fields`, and a run's ``config.json`` records no other
      scoped field.
    spectral_note: said by the spectral CLI when the PE has no Toeplitz form.
    kinds: the ways the PE enters attention, declared (a subset of
      :data:`KINDS`, e.g. ``("input", "rotary")``): ``input`` (a table added
      to the embeddings), ``bias`` (an additive logit bias), ``rotary`` (a
      q/k transform), ``contextual`` (a content-dependent logit term),
      ``factor`` (a multiplicative logit factor), ``dynamic`` (a q/k
      transform with the layer's parameters: :meth:`layer_qk`), ``gated`` (a
      bias computed from the layer's input: :meth:`gate_bias`). The model calls every hook
      whatever is declared; analyses (decomposition, length generalisation,
      the report) read ``kinds``.
    takes_positions: ``input_table`` and ``bias`` accept ``positions=`` (an
      int ``[seq]`` array, given only when they are not ``0..seq-1``), so the
      PE can train with randomized positions.
  """
  name: str = ""
  description: str = ""
  latent_attention: bool = False
  # the hooks accept ``positions=`` (arbitrary token positions): the PE can be
  # trained with randomized positions (``ModelConfig.random_positions``)
  takes_positions: bool = False
  options_type: Optional[type] = None
  reads: tuple[str, ...] = ()
  spectral_note: str = ""
  # How position couples with content in the logits, declared (COUPLINGS):
  # "multiplicative" (a Hadamard product with a PSD unit-diagonal Toeplitz
  # matrix: Schur contraction), "additive" (a Toeplitz bias: Weyl can widen),
  # "content_multiplicative" / "content_additive" (the same forms, with a
  # position term that depends on the tokens: no Toeplitz matrix), or ""
  # (none, absolute, or neither form).
  coupling: str = ""
  kinds: tuple[str, ...] = ()
  # the θ = 0 logits are q·k (+ bias), so the decomposition's content and
  # position Grams add up to them (not PoPE's softplus magnitudes)
  bilinear_logits: bool = True
  # layer_qk also takes the layer's normed input ``x=`` (CARoPE's per-token
  # frequencies); other ``dynamic`` PEs are called without it
  qk_reads_input: bool = False
  # the layer parameter ``[heads, frequencies]`` that holds trained
  # frequencies (rope_learned's θ): recorded at every evaluation
  # (``frequencies.jsonl``) and compared with ``frequencies(cfg)``
  frequency_param: str = ""

  # --- what it is ---------------------------------------------------------
  @property
  def config_fields(self) -> tuple[str, ...]:
    """The PE-scoped ``ModelConfig`` fields that apply to this PE."""
    return (("pe_options",) if self.options_type is not None else ()) + self.reads

  def validate(self, cfg) -> None:
    """Raises ``ValueError`` for a config this PE cannot run."""

  def complete_options(self, cfg, options):
    """``options`` (of :attr:`options_type`) with the defaults that depend on
    the rest of ``cfg`` filled in (called once, when ``cfg`` is built)."""
    return options

  # --- input (absolute) ---------------------------------------------------
  def input_params(self, cfg, next_key: Callable[[], jax.Array], std: float) -> dict:
    """Model-level PE parameters (``std``: the token embedding's init scale);
    ``next_key()`` draws a key (call it only if needed)."""
    return {}

  def input_table(self, cfg, params: dict, seq_len: int,
                  positions=None) -> Optional[jax.Array]:
    """``[seq_len, d_model]`` added to the token embeddings, or None.
    ``positions`` (int ``[seq_len]``) is passed only to a PE that
    ``takes_positions``, and only when they are not ``0..seq_len-1``."""
    return None

  # --- additive bias ------------------------------------------------------
  def layer_params(self, cfg, next_key: Callable[[], jax.Array]) -> dict:
    """One layer's PE parameters (drawn in layer order)."""
    return {}

  def bias(self, cfg, params: dict, seq_len: int, positions=None) -> Optional[jax.Array]:
    """One layer's logit bias ``[heads, seq_len, seq_len]``, or None
    (``positions``: as for :meth:`input_table`)."""
    return None

  def bias_extremes(self, cfg, seq_len: int):
    """Exact ``(λ_min, λ_max)`` per head of the bias's symmetric part where a
    closed form exists, else None."""
    return None

  def content_bias(self, cfg, params: dict, q, k, mask) -> Optional[jax.Array]:
    """A logit term ``[batch, heads, q, k]`` from the layer's (transformed)
    queries/keys ``[batch, seq, heads, d]`` and its attention ``mask``, or None."""
    return None

  def logit_factor(self, cfg, params: dict, seq_len: int,
                   positions=None) -> Optional[jax.Array]:
    """One layer's multiplicative factor ``[heads, seq_len, seq_len]`` on the
    content logits ``q k^T / sqrt(d)`` (applied before any bias), or None."""
    return None

  # --- a layer's own q/k transform, and a bias from its input -------------
  def layer_qk(self, cfg, params: dict, q, k, positions, freq_mask=None):
    """``(q', k')`` from one layer's queries/keys ``[batch, seq, heads, d]``
    with its PE ``params`` (``positions`` broadcast against ``[batch, seq,
    heads]``; ``freq_mask [heads, frequencies]``: 0 turns that frequency's
    position off). Declared by kind ``dynamic``; the outputs may be wider.
    A PE with :attr:`qk_reads_input` gets ``x=``, the layer's normed input
    ``[batch, seq, d_model]``, as one more keyword."""
    raise NotImplementedError(f"PE {self.name!r} declares no layer q/k transform")

  def logit_scale(self, cfg) -> Optional[float]:
    """The logit scale when it is not ``1/sqrt`` of the transformed width."""
    return None

  def frequency_count(self, cfg) -> int:
    """Frequencies per head that ``freq_mask`` switches (``layer_qk`` PEs)."""
    return 0

  def frequencies(self, cfg) -> Optional[np.ndarray]:
    """A ``layer_qk`` PE's ``[frequency_count]`` frequencies (at
    initialisation where they are trained), or None."""
    return None

  def gate_bias(self, cfg, params: dict, x, mask=None):
    """``[batch, heads, seq, seq]`` additive bias from one layer's (normed)
    input ``x [batch, seq, d_model]``. Declared by kind ``gated``."""
    raise NotImplementedError(f"PE {self.name!r} declares no gate bias")

  # --- q/k transform --------------------------------------------------------
  def qk_transform(self, cfg):
    """A hashable ``transform(q, k, positions) -> (q, k)``, or None."""
    return None

  def rotary_heads(self, cfg) -> int:
    """Heads (of a standard attention layer) the transform applies to."""
    return 0

  def rotary_dim(self, cfg) -> int:
    """Width of the transformed q/k channel."""
    return cfg.pe_options.rope_dim if self.latent_attention else cfg.head_dim

  def rotary_frequencies(self, cfg) -> Optional[np.ndarray]:
    """``[rotary_dim/2]`` inverse frequencies when the transform is a pure
    rotation (the logits then have the Hadamard form), else None."""
    t = self.qk_transform(cfg)
    if t is None or not t.is_rotation:
      return None
    return t.frequencies(self.rotary_dim(cfg))

  # --- spectral view --------------------------------------------------------
  def toeplitz_coeffs(self, cfg, params: dict, seq_len: int) -> Optional[jax.Array]:
    """``[..., 2n-1]`` Hermitian Toeplitz coefficients of the PE's position
    matrix at length ``seq_len`` (see module docstring), or None."""
    return None

  toeplitz_label: str = ""  # what toeplitz_coeffs describe, for tables

  def table_reach(self, cfg) -> Optional[int]:
    """The largest offset the PE's parameters tell apart (a clipped relative
    table's distance), or None when unbounded."""
    return None

  def run_label(self, model: dict) -> str:
    """How a run of this PE with model config dict ``model`` is labelled."""
    return self.name

  def __repr__(self) -> str:
    return f"<PE {self.name}>"


def register(encoding: PositionalEncoding, *, replace: bool = False) -> PositionalEncoding:
  """Adds ``encoding`` to the registry under ``encoding.name``."""
  if not encoding.name or not encoding.name.replace("_", "").isalnum():
    raise ValueError(f"a PE name must be a non-empty identifier, got {encoding.name!r}")
  unknown = [k for k in encoding.kinds if k not in KINDS]
  if unknown or len(set(encoding.kinds)) != len(encoding.kinds):
    raise ValueError(f"PE {encoding.name!r} declares kinds {encoding.kinds!r}; each must be "
                     f"one of {', '.join(KINDS)}, once")
  if encoding.coupling not in COUPLINGS:
    raise ValueError(f"PE {encoding.name!r} declares coupling {encoding.coupling!r}; it must "
                     f"be one of {', '.join(map(repr, COUPLINGS))}")
  opts = encoding.options_type
  if opts is not None and not (dataclasses.is_dataclass(opts) and isinstance(opts, type)
                               and opts.__dataclass_params__.frozen):
    raise ValueError(f"PE {encoding.name!r}: options_type must be a frozen dataclass, "
                     f"got {opts!r}")
  if encoding.name in REGISTRY and not replace:
    raise ValueError(f"PE {encoding.name!r} is already registered; choose another name")
  REGISTRY[encoding.name] = encoding
  return encoding


# PE modules loaded by load_module: spec -> the PE names it registered.
_LOADED: dict[str, tuple[str, ...]] = {}


def load_module(spec: str) -> tuple[str, ...]:
  """Imports a researcher's module that registers PEs, once, and returns the
  names it registered: ``spec`` is a dotted module name (importable from the
  current directory or ``sys.path``) or the path of a ``.py`` file. What
  ``ModelConfig.pe_module`` records, so that every analysis of a run loads
  the module again. A module that registers a name already taken fails with
  one line naming it (ValueError), as does one that cannot be imported."""
  if not isinstance(spec, str) or not spec.strip():
    raise ValueError(f"a PE module must be a module name or a .py path, got {spec!r}")
  if spec in _LOADED:
    return _LOADED[spec]
  before = set(REGISTRY)
  try:
    if spec.endswith(".py") or os.sep in spec:
      path = os.path.abspath(spec)
      if not os.path.isfile(path):
        raise ValueError(f"PE module {spec!r}: no such file")
      name = "pe_spectral_user_" + re.sub(r"\W", "_", path)
      if name not in sys.modules:
        loader = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        try:
          loader.loader.exec_module(module)
        except BaseException:
          del sys.modules[name]
          raise
    else:
      importlib.import_module(spec)
  except ImportError as e:
    raise ValueError(f"PE module {spec!r} cannot be imported: {e}") from None
  except ValueError as e:
    if str(e).startswith("PE module"):
      raise
    raise ValueError(f"PE module {spec!r}: {e}") from None
  added = tuple(n for n in REGISTRY if n not in before)
  _LOADED[spec] = added
  return added


def unregister(name: str) -> None:
  """Removes ``name``; a PE module that registered it counts as not loaded
  (:func:`load_module` runs it again; a ``.py`` file is re-executed)."""
  REGISTRY.pop(name, None)
  for spec, added in list(_LOADED.items()):
    if name in added:
      del _LOADED[spec]
      for key in [k for k, m in sys.modules.items()
                  if getattr(m, "__file__", None) == os.path.abspath(spec)]:
        del sys.modules[key]


def names() -> tuple[str, ...]:
  return tuple(REGISTRY)


def get(name: str) -> PositionalEncoding:
  """The registered encoding ``name``; a clear error lists the valid names."""
  try:
    return REGISTRY[name]
  except KeyError:
    raise ValueError(f"unknown positional encoding {name!r}; valid names: "
                     f"{', '.join(REGISTRY)}") from None


def _symmetric(coeffs):
  """Symmetric part of Toeplitz coefficients ``[..., 2n-1]`` (Hermitian, real)."""
  return 0.5 * (coeffs + coeffs[..., ::-1])


def _sinusoid_input(cfg, seq_len: int, positions=None) -> jax.Array:
  """The fixed sinusoid ``[seq_len, d_model]`` at ``0..seq_len-1`` or ``positions``."""
  if positions is not None:
    return P.sinusoidal_at(positions, cfg.d_model, cfg.rope_base)
  return P.sinusoidal_table(seq_len, cfg.d_model, cfg.rope_base)


def _table_rows(table, seq_len: int, positions=None) -> jax.Array:
  """Rows ``0..seq_len-1`` (or ``positions``) of a learned position table."""
  rows = table.shape[0]
  if seq_len > rows:
    raise ValueError(f"sequence length {seq_len} exceeds max_len {rows} of the "
                     f"learned position table")
  if positions is not None:  # drawn below the range by construction
    return table[positions]
  return table[:seq_len]


def _phase_coeffs(freqs, seq_len: int) -> Optional[jax.Array]:
  """``[1, 2n-1]`` coefficients ``cos(k θ_1)``: the real part of one
  frequency's phase matrix (None with fewer than two frequencies)."""
  if freqs is None or len(freqs) < 2:
    return None
  k = jnp.arange(-(seq_len - 1), seq_len, dtype=jnp.float32)
  return jnp.cos(k * float(freqs[1]))[None]


# ----------------------------------------------------------------------------
# The encodings.
# ----------------------------------------------------------------------------

class NoPE(PositionalEncoding):
  name = "nope"
  description = "no positional encoding"
  spectral_note = "no positional term: nothing to bound"


class Sinusoidal(PositionalEncoding):
  name = "sinusoidal"
  description = "fixed sinusoid added to the input (paper: absolute)"
  toeplitz_label = "Gram P Pᵀ of the input table"
  reads = ("rope_base",)
  kinds = ("input",)

  takes_positions = True

  def input_table(self, cfg, params, seq_len, positions=None):
    return _sinusoid_input(cfg, seq_len, positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    if cfg.d_model % 2:
      return None
    return spectral.sinusoidal_gram_coeffs(seq_len, cfg.d_model, cfg.rope_base)[None]


class Learned(PositionalEncoding):
  name = "learned"
  description = "learned absolute table added to the input (paper: random)"
  spectral_note = "a learned absolute table is not Toeplitz"
  kinds = ("input",)

  takes_positions = True

  def input_params(self, cfg, next_key, std):
    rows = cfg.position_range  # max_len, or the randomized positions' range
    return {"pos_table": std * jax.random.normal(next_key(), (rows, cfg.d_model))}

  def input_table(self, cfg, params, seq_len, positions=None):
    return _table_rows(params["pos_table"], seq_len, positions)


class Relative(PositionalEncoding):
  name = "relative"
  coupling = "additive"
  kinds = ("bias",)
  description = ("learned per-layer per-head scalar bias per clipped offset "
                 "(T5 log-buckets optional)")
  toeplitz_label = "symmetric part of the bias"
  reads = ("relative_buckets", "relative_max_distance")

  def layer_params(self, cfg, next_key):
    rows = (cfg.relative_buckets if cfg.relative_buckets is not None
            else 2 * cfg.relative_distance + 1)
    return {"rel_table": 0.02 * jax.random.normal(next_key(), (rows, cfg.num_heads))}

  def table_reach(self, cfg):
    return cfg.relative_distance

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    return P.relative_bias_from_table(params["rel_table"], seq_len,
                                      max_distance=cfg.relative_distance,
                                      num_buckets=cfg.relative_buckets, positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    # bias[i, j] = table[index(j - i)]: coefficient t_k (k = j - i) per head
    idx = P.relative_table_index(jnp.arange(-(seq_len - 1), seq_len),
                                 max_distance=cfg.relative_distance,
                                 num_buckets=cfg.relative_buckets)
    return _symmetric(params["rel_table"][idx].T)


class Alibi(PositionalEncoding):
  name = "alibi"
  coupling = "additive"
  kinds = ("bias",)
  description = "ALiBi: -m_h |i-j| logit bias (causal variant optional)"
  options_type = AlibiOptions
  toeplitz_label = "symmetric ALiBi bias"

  def slope_scheme(self, cfg) -> str:
    """'paper' (``exp(-h/H)``) in faithful mode unless set, else 'standard'."""
    if cfg.pe_options.slopes is None:
      return "paper" if cfg.faithful else "standard"
    return cfg.pe_options.slopes

  def slopes(self, cfg) -> jax.Array:
    """``[num_heads]``: ``exp(-h/H)`` for the paper's scheme, else Press et al.'s."""
    if self.slope_scheme(cfg) == "paper":
      return P.alibi_slopes_paper(cfg.num_heads)
    return P.alibi_slopes(cfg.num_heads)

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    return P.alibi_bias(seq_len, self.slopes(cfg), causal=cfg.causal, positions=positions)

  def run_label(self, model):
    slopes = (model.get("pe_options") or {}).get("slopes")  # set, not the mode's default
    return self.name if slopes is None else f"{self.name} ({slopes} slopes)"

  def bias_extremes(self, cfg, seq_len):
    if cfg.causal or seq_len < 2:
      return None
    return spectral.alibi_extreme_eigs(seq_len, self.slopes(cfg))

  def toeplitz_coeffs(self, cfg, params, seq_len):
    k = jnp.abs(jnp.arange(-(seq_len - 1), seq_len)).astype(jnp.float32)
    return -self.slopes(cfg)[:, None] * k


class Kerple(PositionalEncoding):
  toeplitz_label = "KERPLE bias"
  coupling = "additive"
  kinds = ("bias",)

  def __init__(self, kind: str):
    self.kind = kind
    self.name = f"kerple_{kind}"
    self.description = ("KERPLE (log): -r1_h log(1 + r2_h |i-j|), r1, r2 > 0 learned"
                        if kind == "log" else
                        "KERPLE (power): -r1_h |i-j|^r2_h, r1 > 0, 0 < r2 <= 2 learned")

  def layer_params(self, cfg, next_key):
    # unconstrained; r1 = softplus -> 1 and r2 -> 1 at init for every head
    one = P.inv_softplus(1.0)
    return {"kerple_r1": jnp.full((cfg.num_heads,), one),
            "kerple_r2": jnp.full((cfg.num_heads,), one if self.kind == "log" else 0.0)}

  def _r(self, params):
    return P.kerple_params(params["kerple_r1"], params["kerple_r2"], kind=self.kind)

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    if positions is not None:
      return P.kerple_of_distance(P.distances(positions), *self._r(params), kind=self.kind)
    return P.kerple_bias(seq_len, *self._r(params), kind=self.kind)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return P.kerple_coeffs(seq_len, *self._r(params), kind=self.kind)


class Fire(PositionalEncoding):
  name = "fire"
  coupling = "additive"
  kinds = ("bias",)
  description = ("FIRE: f_θ(ψ(|i-j|)/ψ(max(L, i))), ψ(x) = log(cx+1), per-layer MLP, "
                 "learned c and L")
  options_type = FireOptions
  toeplitz_label = "FIRE bias (Toeplitz while n - 1 <= L)"

  def layer_params(self, cfg, next_key):
    # The threshold starts at the training length: every training query shares
    # one normaliser (Toeplitz), longer ones are interpolated.
    return P.fire_init(next_key(), cfg.num_heads, hidden=cfg.pe_options.hidden,
                       threshold=float(cfg.max_len), c=0.1)

  takes_positions = True

  def bias(self, cfg, params, seq_len, positions=None):
    return P.fire_bias(params, seq_len, causal=cfg.causal, positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    if cfg.causal:
      return None
    try:
      _, L = P.fire_constants(params)
      if float(jnp.min(L)) < seq_len - 1:
        return None  # queries beyond L have their own normaliser: not Toeplitz
    except jax.errors.ConcretizationTypeError:
      pass  # traced: the caller vouches for the regime (docstring of fire_coeffs)
    return P.fire_coeffs(params, seq_len)


# The eval-time rotary context extension's fields (ModelConfig.rope_scaling_spec).
_ROPE_SCALING = ("rope_scaling", "rope_scaling_factor", "rope_scaling_original_len")


class Rotary(PositionalEncoding):
  """RoPE on ``rotary_heads`` heads (all of them unless partial)."""
  toeplitz_label = "Re of one frequency's phase matrix (θ_1)"

  def __init__(self, name: str, description: str, *, partial: bool = False,
               fraction_option: bool = False, input_sinusoid: bool = False):
    self.name = name
    self.description = description
    self.partial = partial
    self.fraction_option = fraction_option
    self.input_sinusoid = input_sinusoid
    self.options_type = (PRopeOptions if fraction_option else
                         PartialRopeOptions if partial else None)
    self.reads = ("rope_base",) + _ROPE_SCALING
    # the input sinusoid adds absolute terms: neither pure form
    self.coupling = "" if input_sinusoid else "multiplicative"
    self.kinds = ("input", "rotary") if input_sinusoid else ("rotary",)

  def validate(self, cfg):
    if self.partial and not cfg.pe_options.heads <= cfg.num_heads:
      raise ValueError(f"partial_rope's heads (rope_heads) must be in [0, num_heads="
                       f"{cfg.num_heads}], got {cfg.pe_options.heads}")
    if cfg.head_dim % 2:
      raise ValueError(f"rotary PE {self.name!r} needs an even head_dim; "
                       f"d_model/num_heads = {cfg.head_dim}")

  def fraction(self, cfg) -> Optional[float]:
    """p-RoPE's share of rotating pairs (default 0.75); None = every pair."""
    if not self.fraction_option:
      return None
    return cfg.pe_options.fraction

  def qk_transform(self, cfg):
    return P.Rotation(base=cfg.rope_base, scaling=cfg.rope_scaling_spec,
                      fraction=self.fraction(cfg))

  def rotary_heads(self, cfg):
    return cfg.pe_options.heads if self.partial else cfg.num_heads

  def run_label(self, model):
    if not self.partial:
      return self.name
    return f"{self.name} (k={(model.get('pe_options') or {}).get('heads')})"

  takes_positions = True

  def input_table(self, cfg, params, seq_len, positions=None):
    if self.input_sinusoid:
      return _sinusoid_input(cfg, seq_len, positions)
    return None

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return _phase_coeffs(self.rotary_frequencies(cfg), seq_len)


class XPosEncoding(Rotary):
  """xPos: RoPE with a per-pair exponential scale (queries ζ^n, keys ζ^-m)."""

  def __init__(self):
    super().__init__("xpos", "xPos: RoPE with per-pair decay ζ_i^((n-m)/scale_base) "
                     "(one-sided: keys ahead are amplified in bidirectional attention)")
    self.options_type = XPosOptions
    self.coupling = "multiplicative"  # a Hadamard form, but not unit-modulus
    self.spectral_note = ("xPos' phase factors ζ^(n-m) e^{i(n-m)θ} are not unit-modulus: "
                          "no Schur contraction, and no Hadamard form is checked")

  def qk_transform(self, cfg):
    return P.XPos(base=cfg.rope_base,
                  gamma=cfg.pe_options.gamma, scale_base=cfg.pe_options.scale_base,
                  scaling=cfg.rope_scaling_spec)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return None


class MLA(PositionalEncoding):
  name = "mla"
  description = "DeepSeek-style multi-head latent attention with decoupled RoPE"
  latent_attention = True
  # the faithful model's zero-initialised absolute table is not declared: the
  # paper's MLA is a rotary PE (decompose and the report treat it so)
  kinds = ("rotary",)
  options_type = MLAOptions
  reads = ("rope_base",) + _ROPE_SCALING
  spectral_note = ("faithful mode: the paper's MLA transform is not a rotation (its sines and "
                   "cosines come from different frequencies), so it has no phase matrix")
  toeplitz_label = "Re of one frequency's phase matrix (θ_1) of the rotary channel"

  def complete_options(self, cfg, options):
    if options.rope_dim is None and cfg.head_dim % 2:
      raise ValueError(f"MLA's rotary width defaults to the head width, d_model/num_heads = "
                       f"{cfg.head_dim}, which is odd: set an even pe_options.rope_dim")
    return dataclasses.replace(
        options,
        latent_dim=cfg.d_model // 2 if options.latent_dim is None else options.latent_dim,
        rope_dim=cfg.head_dim if options.rope_dim is None else options.rope_dim)

  def shared_rope_query(self, cfg) -> bool:
    """One rotary query for all heads (the paper; default in faithful mode)."""
    opt = cfg.pe_options.shared_rope_query
    return cfg.faithful if opt is None else opt

  def paper_rotary(self, cfg) -> bool:
    """The paper's non-rotation transform (default in faithful mode)."""
    opt = cfg.pe_options.paper_rotary
    return cfg.faithful if opt is None else opt

  def validate(self, cfg):
    if cfg.rope_scaling is not None and self.paper_rotary(cfg):
      raise ValueError("rope_scaling does not apply to the paper's MLA transform "
                       "(it is not a rotation)")

  takes_positions = True

  def input_params(self, cfg, next_key, std):
    # the paper's MLA model has a zero-initialised learned absolute table
    if cfg.faithful:
      return {"pos_table": jnp.zeros((cfg.position_range, cfg.d_model))}
    return {}

  def input_table(self, cfg, params, seq_len, positions=None):
    if "pos_table" not in params:
      return None
    return _table_rows(params["pos_table"], seq_len, positions)

  def qk_transform(self, cfg):
    if self.paper_rotary(cfg):
      return P.PaperMLARotation(base=cfg.rope_base)
    return P.Rotation(base=cfg.rope_base, scaling=cfg.rope_scaling_spec)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return _phase_coeffs(self.rotary_frequencies(cfg), seq_len)


class CoPE(PositionalEncoding):
  name = "cope"
  description = ("CoPE: q_i·e[p_ij] with contextual positions p_ij = gated counts "
                 "σ(q·k) between key and query, interpolated e (per layer)")
  options_type = CoPEOptions
  kinds = ("contextual",)
  spectral_note = ("CoPE's positions are gated counts of the content (σ(q·k)): the "
                   "position term depends on the tokens, so it has no Toeplitz form")

  def npos(self, cfg) -> int:
    return cfg.pe_options.positions or cfg.max_len

  def layer_params(self, cfg, next_key):
    # zero, as the paper: a CoPE model starts as NoPE and learns its table
    return {"cope_pos_emb": jnp.zeros((self.npos(cfg), cfg.head_dim))}

  def content_bias(self, cfg, params, q, k, mask):
    return P.cope_bias(q, k, params["cope_pos_emb"], scale=1.0 / math.sqrt(q.shape[-1]),
                       mask=mask, causal=cfg.causal)


class RopeAdditive(PositionalEncoding):
  """RoPE's kernel, coupled additively: ``Σ_k w_{h,k} cos((i-j)θ_k)``.

  The same frequencies ``θ_k`` as :class:`Rotary` (``rope_base``, head width),
  but added to the logits as a content-free Toeplitz bias with learned
  per-layer, per-head weights instead of multiplying the content Gram.

  Initialisation: ``w ~ N(0, σ²)`` with ``σ = s * sqrt(2 / pairs)``, where ``s``
  is the standard deviation of the content logits ``q·k/sqrt(d)`` at
  initialisation (1 for the clean LeCun init on layer-normed inputs, 1/3 for
  PyTorch's U(±1/sqrt(fan_in)) init). Then the bias at a non-zero offset has
  standard deviation ``s`` over draws (``Σ_k cos² ≈ pairs/2``): position enters
  at the same scale as RoPE's logits do at init.
  """
  name = "rope_additive"
  reads = ("rope_base",)
  description = ("RoPE's cosines as an additive bias: sum_k w_hk cos((i-j) θ_k), "
                 "learned per-layer per-head w (the additive twin of rope)")
  coupling = "additive"
  kinds = ("bias",)
  takes_positions = True
  toeplitz_label = "additive cosine bias (head 0)"

  def validate(self, cfg):
    if cfg.head_dim % 2:
      raise ValueError(f"rope_additive needs an even head_dim (RoPE's pairs); "
                       f"d_model/num_heads = {cfg.head_dim}")

  def frequencies(self, cfg) -> np.ndarray:
    """RoPE's inverse frequencies ``[head_dim/2]`` for this model."""
    return P.rope_inverse_frequencies(cfg.head_dim, cfg.rope_base)

  def init_std(self, cfg) -> float:
    logit_std = 1.0 / 3.0 if cfg.init == "torch" else 1.0
    return logit_std * math.sqrt(2.0 / (cfg.head_dim // 2))

  def layer_params(self, cfg, next_key):
    pairs = cfg.head_dim // 2
    return {"rope_cos_w": self.init_std(cfg)
            * jax.random.normal(next_key(), (cfg.num_heads, pairs))}

  def bias(self, cfg, params, seq_len, positions=None):
    return P.rotary_cos_bias(params["rope_cos_w"], self.frequencies(cfg), seq_len,
                             positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return P.rotary_cos_coeffs(params["rope_cos_w"], self.frequencies(cfg), seq_len)


class AlibiMultiplicative(Alibi):
  """ALiBi's kernel, coupled multiplicatively: logits ``(q·k/sqrt(d)) ρ_h^{|i-j|}``.

  ``ρ_h = exp(-m_h)`` with ALiBi's own slopes ``m_h`` (the mode's scheme), so
  both members of the pair apply the same distance kernel ``e^{-m_h|i-j|}``:
  ALiBi to the unnormalised attention weights (``exp(logit - m|i-j|)``), this
  PE to the logits. ``F = [ρ^{|i-j|}]`` is a Kac-Murdock-Szegő matrix:
  positive definite with unit diagonal for ``0 < ρ < 1``, so Schur's theorem
  bounds ``λ_max(F ∘ G) <= max_i G_ii`` for a PSD content Gram ``G``.
  Nothing is learned (as ALiBi). Causal attention (a language model) uses the
  factor's lower triangle ``ρ^{i-j}``, ``j <= i``: the masked entries never
  reach a probability. The Toeplitz coefficients and Schur's bound stay those
  of the symmetric factor, which the causal logits are the lower half of.
  """
  name = "alibi_multiplicative"
  description = ("ALiBi's kernel as a Hadamard factor: logits times rho_h^|i-j|, "
                 "rho_h = exp(-m_h) (the multiplicative twin of alibi)")
  coupling = "multiplicative"
  kinds = ("factor",)
  toeplitz_label = "KMS factor ρ^|k| (head 0)"

  def rhos(self, cfg) -> jax.Array:
    """``[num_heads]`` decay rates ``exp(-m_h)``."""
    return P.decay_rates(self.slopes(cfg))

  def bias(self, cfg, params, seq_len, positions=None):
    return None

  def bias_extremes(self, cfg, seq_len):
    return None

  def logit_factor(self, cfg, params, seq_len, positions=None):
    return P.decay_factor(seq_len, self.rhos(cfg), positions=positions)

  def toeplitz_coeffs(self, cfg, params, seq_len):
    return P.decay_coeffs(seq_len, self.rhos(cfg))


class PoPE(PositionalEncoding):
  """PoPE (Gopalakrishnan et al. 2025, arXiv 2509.10534): polar coordinates.

  Each query/key channel ``c`` of a ``d``-wide head is ``softplus(x_c)
  e^{i pos θ_c}`` (``d`` frequencies ``θ_c = base^(-c/d)``), keys with an
  extra learned phase ``δ_c`` per layer and head; the logit is
  ``Σ_c softplus(q_c) softplus(k_c) cos((j-i) θ_c + δ_c) / sqrt(d)``
  (:func:`positional.pope_transform`). Per channel a Hadamard product of a
  non-negative rank-one content term with a Toeplitz cosine: position and
  content are coupled multiplicatively, but the content can no longer turn
  the phase. Scale ``1/sqrt(d)`` of the head width, as the reference."""
  name = "pope"
  description = ("PoPE: softplus(q_c) softplus(k_c) cos((j-i) θ_c + δ_c), d frequencies, "
                 "learned key phase δ (polar coordinates)")
  coupling = "content_multiplicative"
  kinds = ("dynamic",)
  bilinear_logits = False
  options_type = PoPEOptions
  reads = ("rope_base",)
  takes_positions = True
  spectral_note = ("PoPE's channel c is D_q T_c D_k with content-dependent non-negative "
                   "diagonals D: no Toeplitz form of the logits; for q = k Ostrowski bounds "
                   "each channel's eigenvalues by T_c's times the extremes of D² "
                   "(docs/spectral.md)")

  def frequencies(self, cfg) -> np.ndarray:
    return P.pope_frequencies(cfg.head_dim, cfg.rope_base)

  def frequency_count(self, cfg):
    return cfg.head_dim

  def layer_params(self, cfg, next_key):
    if not cfg.pe_options.learned_phase:
      return {}
    return {"pope_phase": jnp.zeros((cfg.num_heads, cfg.head_dim))}

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None):
    theta = jnp.asarray(self.frequencies(cfg), jnp.float32)
    if freq_mask is not None:
      theta = theta * freq_mask  # [heads, d]
    return P.pope_transform(q, k, positions, theta, params.get("pope_phase"))

  def logit_scale(self, cfg):
    return 1.0 / math.sqrt(cfg.head_dim)


class _RotaryPairs(PositionalEncoding):
  """A ``dynamic`` PE that turns RoPE's ``head_dim/2`` pairs and starts from
  RoPE's frequencies (rope_learned, carope): the even-width check, the
  frequency count a mask switches, and the initial frequencies."""
  kinds = ("dynamic",)
  reads = ("rope_base",)

  def validate(self, cfg):
    if cfg.head_dim % 2:
      raise ValueError(f"{self.name} needs an even head_dim; d_model/num_heads = "
                       f"{cfg.head_dim}")

  def frequency_count(self, cfg):
    return cfg.head_dim // 2

  def frequencies(self, cfg) -> np.ndarray:
    """RoPE's ``[head_dim/2]`` frequencies: every head's at initialisation."""
    return P.rope_inverse_frequencies(cfg.head_dim, cfg.rope_base)


class RopeLearned(_RotaryPairs):
  """RoPE with trainable per-layer, per-head frequencies ``θ_{h,j}``,
  initialised at RoPE's (the one-dimensional form of LieRE / ComRoPE /
  STRING, whose extra rotation the query/key projections absorb). The phases
  stay content-free, so each head's logits keep the Hadamard form with a
  unit-modulus Toeplitz phase matrix; only the spectrum moves in training."""
  name = "rope_learned"
  description = "RoPE with trained per-layer per-head frequencies θ (initialised at RoPE's)"
  coupling = "multiplicative"
  frequency_param = "rope_theta"
  takes_positions = True
  toeplitz_label = "Re of each head's phase matrix at its trained θ_1"

  def layer_params(self, cfg, next_key):
    theta = jnp.asarray(self.frequencies(cfg), jnp.float32)
    return {"rope_theta": jnp.tile(theta, (cfg.num_heads, 1))}

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None):
    theta = params["rope_theta"]  # [heads, d/2]
    if freq_mask is not None:
      theta = theta * freq_mask
    angles = jnp.asarray(positions, jnp.float32)[..., None] * theta
    return (P.rotate(q, angles).astype(q.dtype), P.rotate(k, angles).astype(k.dtype))

  def toeplitz_coeffs(self, cfg, params, seq_len):
    k = jnp.arange(-(seq_len - 1), seq_len, dtype=jnp.float32)
    theta = params["rope_theta"][..., 1]  # [..., heads]
    return jnp.cos(k * theta[..., None])


class AlibiData(PositionalEncoding):
  """Data-dependent ALiBi (forgetting attention, Lin et al. 2025, "Forgetting
  Transformer"; x-transformers' ``DataDependentAlibi``): forget gates
  ``f_t = σ(w_h·x_t + b_h)`` from each layer's (normed) input, and the bias
  ``Σ log f_t`` over the tokens between query and key
  (:func:`positional.forget_gate_bias`); bidirectional attention has a second
  gate set for keys ahead. ALiBi whose slope the tokens set: with constant
  gates it is ALiBi with slope ``-log f``. Gate weights ``N(0, 1/d_model)``."""
  name = "alibi_data"
  description = ("data-dependent ALiBi: sum of log forget gates σ(w·x_t + b) between "
                 "query and key (forgetting attention)")
  coupling = "content_additive"
  kinds = ("gated",)
  options_type = AlibiDataOptions
  spectral_note = ("alibi_data's bias sums gates computed from the tokens: it has no "
                   "Toeplitz form (ALiBi's only when the gates are constant)")

  def gates(self, cfg) -> int:
    return cfg.num_heads * (1 if cfg.causal else 2)

  def layer_params(self, cfg, next_key):
    g = self.gates(cfg)
    return {"gate_w": jax.random.normal(next_key(), (cfg.d_model, g)) / math.sqrt(cfg.d_model),
            "gate_b": jnp.full((g,), cfg.pe_options.gate_bias_init)}

  def gate_bias(self, cfg, params, x, mask=None):
    logits = x.astype(jnp.float32) @ params["gate_w"] + params["gate_b"]
    return P.forget_gate_bias(jax.nn.log_sigmoid(logits), causal=cfg.causal)


class CARoPE(_RotaryPairs):
  """CARoPE (Veisi et al. 2025, arXiv 2507.23083): RoPE whose base frequency
  each token sets, per head. ``f(x_t)_h = 1 / (softplus(x_t W + b)_h + 1)``
  from the layer's (normed) input, and pair ``i`` of head ``h`` turned by
  the accumulated phase ``φ_i^(h)(m) = Σ_{t<=m} f(x_t)_h^i``
  (:func:`positional.carope_phases`). With every ``f = θ_1 = base^(-2/d)``
  it is RoPE. The phase between a query and a key sums the tokens between
  them, so the logits are a Hadamard product with a content-dependent phase
  matrix: no Toeplitz form.

  The paper's ``W`` has no bias and the paper says CARoPE starts from RoPE
  without saying how; here ``W = 0`` and a per-head bias
  ``b = softplus⁻¹(1/θ_1 - 1)`` make step 0 exactly RoPE (the bias is this
  codebase's addition)."""
  name = "carope"
  description = ("CARoPE: RoPE with per-token per-head base f(x_t) = 1/(softplus(x_t W + b) + 1), "
                 "phases Σ_{t<=m} f(x_t)^i (context-aware)")
  coupling = "content_multiplicative"
  qk_reads_input = True
  spectral_note = ("CARoPE's phase between two tokens sums f(x_t)^i over the tokens between "
                   "them: the phase matrix depends on the content, so it has no Toeplitz "
                   "form (RoPE's only when f is constant)")

  def layer_params(self, cfg, next_key):
    theta1 = cfg.rope_base ** (-2.0 / cfg.head_dim)  # RoPE's ratio θ_{i+1}/θ_i
    return {"carope_w": jnp.zeros((cfg.d_model, cfg.num_heads)),
            "carope_b": jnp.full((cfg.num_heads,), P.inv_softplus(1.0 / theta1 - 1.0))}

  def layer_qk(self, cfg, params, q, k, positions, freq_mask=None, x=None):
    if x is None:
      raise ValueError("carope's q/k transform needs the layer's input x")
    f = P.carope_frequency(x, params["carope_w"], params["carope_b"])
    angles = P.carope_phases(f, positions, cfg.head_dim // 2, freq_mask)
    return (P.rotate(q, angles).astype(q.dtype), P.rotate(k, angles).astype(k.dtype))


for _enc in (
    NoPE(), Sinusoidal(), Learned(), Relative(), Alibi(),
    Rotary("rope", "rotary on all heads, interleaved pairs"),
    Rotary("partial_rope", "rotary on the first k heads only (rope_heads, default 1)",
           partial=True),
    Rotary("rope_sinusoidal", "input sinusoid + rotary (what the paper's code calls rope)",
           input_sinusoid=True),
    Kerple("log"), Kerple("power"),
    Rotary("p_rope", "p-RoPE: rotary on the highest fraction (0.75) of the frequency "
           "pairs, the rest unrotated", fraction_option=True),
    MLA(), Fire(), XPosEncoding(), CoPE(), RopeAdditive(), AlibiMultiplicative(),
    PoPE(), RopeLearned(), AlibiData(), CARoPE(),
):
  register(_enc)
del _enc

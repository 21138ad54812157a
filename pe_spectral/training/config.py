"""The one configuration table: named presets and the run config built from them.

Presets: ``smoke`` (tests, seconds), ``cpu`` (default, minutes), ``paper``
(GPU); a study registers its own (:func:`register_preset`, docs/presets.md).
A preset fixes model sizes (:data:`MODEL_PRESETS`), both tasks' generators
(:data:`TASK_PRESETS`) and the training loop (:data:`TRAIN_PRESETS`).
:func:`build` turns (preset, task, pe, faithful, overrides) into a validated
:class:`RunConfig` of the three frozen config dataclasses the library uses;
:func:`train_settings` is the budget a (preset, pe, faithful) gets before any
override. Validation happens here and in the config dataclasses themselves.
:class:`RunSpec` is one run's identity (preset, task, PE, mode and the fields
set away from the preset) and its name, ``<task>/<pe>[-...]``.

>>> rc = build("smoke", "distance", "rope")
>>> rc.model.d_model, rc.task.seq_len, rc.train.batch_size
(16, 20, 32)
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
import re
import typing
from typing import Optional

from pe_spectral.data.tasks import STRING_TASKS, TaskConfig
from pe_spectral.nn.model import ModelConfig, attention_of, script_quirks
from pe_spectral.pe import encodings
from pe_spectral.training.train import TrainConfig

# The library's presets; a study adds its own with register_preset (e.g.
# studies/arxiv_2505_13027/presets.py), and a program imports that module on
# request before it builds a config.
PRESET_NAMES = ["smoke", "cpu", "paper"]

MODEL_PRESETS = {
    "smoke": dict(d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=24),
    # docs/presets.md: small enough for minutes on 2 cores, large enough to
    # separate RoPE from NoPE on Task 1. MLA keeps the paper's ratios at every
    # preset (latent = d_model / 2, rotary width = head_dim: MLAOptions' defaults).
    "cpu": dict(d_model=64, num_heads=4, num_layers=2, d_ff=128, max_len=48),
    "paper": dict(d_model=256, num_heads=16, num_layers=6, d_ff=512, max_len=128),
}

_CPU_DISTANCE = dict(vocab_size=574, num_examples=20_000, seq_len=48, max_len=48,
                     side_min=1, side_max=10, mid_min=1, mid_max=30)
TASK_PRESETS = {
    ("smoke", "distance"): dict(vocab_size=64, num_examples=512, seq_len=20,
                                max_len=24, side_min=1, side_max=4, mid_min=1,
                                mid_max=8),
    ("smoke", "count"): dict(vocab_size=64, num_examples=512, seq_len=20,
                             max_len=24, num_triggers=5, count_max=10),
    # Shrunk generator ranges so the second trigger is never cut (right
    # segments are cut at 48 tokens in a few examples, as the paper cuts at 120).
    ("cpu", "distance"): _CPU_DISTANCE,
    ("cpu", "count"): dict(vocab_size=574, num_examples=20_000, seq_len=48,
                           max_len=48, num_triggers=30, count_max=40),
    ("paper", "distance"): dict(vocab_size=574, num_examples=100_000, seq_len=120,
                                max_len=128, side_min=1, side_max=25, mid_min=1,
                                mid_max=70),
    ("paper", "count"): dict(vocab_size=574, num_examples=50_000, seq_len=120,
                             max_len=128, num_triggers=30, count_max=100),
}

# The string tasks of Ruoss et al. (2023) (tasks.STRING_TASKS): trained on
# lengths 1..seq_len, tested longer by experiments.lengths. They have no paper
# preset (the paper's model is not their reference); `cpu` trains on lengths up
# to 40 as Ruoss et al. do.
for _name, (_vocab, _) in STRING_TASKS.items():
  TASK_PRESETS[("smoke", _name)] = dict(vocab_size=_vocab, num_examples=512, seq_len=12,
                                        max_len=24, min_len=1)
  TASK_PRESETS[("cpu", _name)] = dict(vocab_size=_vocab, num_examples=20_000, seq_len=40,
                                      max_len=48, min_len=1)

# The language model (task ``lm``, byte-level): its own sizes and budget over
# the preset's, since a context of real text and a 257-way next-byte head are
# not the classifiers' 48 tokens (docs/language.md). An epoch is the
# evaluation interval (``num_examples`` windows), not a pass over the corpus.
# ``cpu`` (the issue's ``lm_cpu``) is sized by a pilot (1 seed, 200 steps: 7.3
# steps/s, 2.87 bits/byte against the corpus's 4.56 unigram) so that 8 seeds of
# one PE, one after another, train in under 15 minutes on 2 cores: 700 steps of
# 32 windows of 128 bytes each.
TASK_PRESETS[("smoke", "lm")] = dict(vocab_size=257, num_examples=256, seq_len=32,
                                     max_len=32, eval_windows=16)
TASK_PRESETS[("cpu", "lm")] = dict(vocab_size=257, num_examples=3200, seq_len=128,
                                   max_len=128, eval_windows=256)
TASK_PRESETS[("paper", "lm")] = dict(vocab_size=257, num_examples=64 * 500, seq_len=512,
                                     max_len=512, eval_windows=1024)
TASK_MODEL_PRESETS = {
    ("smoke", "lm"): dict(d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=32,
                          dropout=0.0),
    ("cpu", "lm"): dict(d_model=128, num_heads=4, num_layers=2, d_ff=512, max_len=128,
                        dropout=0.0),
    ("paper", "lm"): dict(d_model=512, num_heads=8, num_layers=8, d_ff=2048, max_len=512,
                          dropout=0.0),
}
TASK_TRAIN_PRESETS = {
    ("smoke", "lm"): dict(learning_rate=3e-3, b1=0.9, b2=0.95, weight_decay=0.0,
                          warmup_frac=0.05, batch_size=16, epochs=2, eval_batch_size=16,
                          train_eval_examples=16),
    ("cpu", "lm"): dict(learning_rate=3e-3, b1=0.9, b2=0.95, weight_decay=0.0,
                        warmup_frac=0.05, batch_size=32, epochs=7, eval_batch_size=64,
                        train_eval_examples=256),
    ("paper", "lm"): dict(learning_rate=1e-3, b1=0.9, b2=0.95, weight_decay=0.0,
                          warmup_frac=0.02, batch_size=64, epochs=20, eval_batch_size=64,
                          train_eval_examples=1024),
}

TRAIN_PRESETS = {
    "smoke": dict(learning_rate=1e-3, b1=0.9, b2=0.98, batch_size=32, epochs=2,
                  eval_batch_size=128, train_eval_examples=128),
    # Sized by measurement (docs/presets.md): every RoPE seed of Task 1 >= 90 %
  # and plateaued in about 10 minutes on 2 cores.
  "cpu": dict(learning_rate=2e-3, b1=0.9, b2=0.98, batch_size=128, epochs=8,
              eval_batch_size=1000, train_eval_examples=1000),
    "paper": dict(learning_rate=1e-4, b1=0.98, b2=0.9, batch_size=512, epochs=100,
                  eval_batch_size=1024, train_eval_examples=4096),
}

# Faithful runs use the paper's optimiser (AdamW, beta = (0.98, 0.9), weight
# decay 1e-5, 6 % warm-up + cosine) at every preset; the learning rate and the
# budget are the preset's (docs/presets.md).
_FAITHFUL_OPT = dict(b1=0.98, b2=0.9, weight_decay=1e-5, warmup_frac=0.06)
# The paper trains its MLA model for 150 epochs at batch 1024 against 100 at
# 512 for the others: 1.5x the examples in 0.75x the steps. Faithful MLA gets
# that ratio at every preset (model.MLA_SCRIPT's budget factors).


def register_preset(name: str, *, model: dict, tasks: dict, train: dict) -> None:
  """Adds a preset: ``model`` (``ModelConfig`` fields), ``tasks`` (``{task:
  TaskConfig fields}``, for each task the preset supports), ``train``
  (``TrainConfig`` fields). Registering the same preset again is allowed only
  with the same values (a module imported twice); another preset of that name
  is an error."""
  entry = (dict(model), {t: dict(kw) for t, kw in tasks.items()}, dict(train))
  if name in PRESET_NAMES:
    have = (MODEL_PRESETS.get(name), {t: TASK_PRESETS[(p, t)] for (p, t) in TASK_PRESETS
                                      if p == name}, TRAIN_PRESETS.get(name))
    if have != entry:
      raise ValueError(f"preset {name!r} is already registered with other values")
    return
  MODEL_PRESETS[name] = entry[0]
  for t, kw in entry[1].items():
    TASK_PRESETS[(name, t)] = kw
  TRAIN_PRESETS[name] = entry[2]
  PRESET_NAMES.append(name)


def train_settings(preset: str, pe: str, faithful: bool, task: Optional[str] = None) -> dict:
  """The training settings (``TrainConfig`` fields) a run of ``pe`` gets at
  ``preset`` (on ``task``, where it has its own: :data:`TASK_TRAIN_PRESETS`)
  before any command-line override."""
  if preset not in PRESET_NAMES:
    raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESET_NAMES)}")
  kw = dict(TRAIN_PRESETS[preset])
  kw.update(TASK_TRAIN_PRESETS.get((preset, task), {}))
  if faithful:
    kw.update(_FAITHFUL_OPT)
    quirks = script_quirks(faithful, attention_of(pe))  # e.g. the paper's MLA budget
    kw["epochs"] = int(round(quirks.epochs_factor * kw["epochs"]))
    kw["batch_size"] = quirks.batch_factor * kw["batch_size"]
  return kw


@dataclasses.dataclass(frozen=True)
class RunConfig:
  preset: str
  model: ModelConfig
  task: TaskConfig
  train: TrainConfig

  def to_dict(self) -> dict:
    return {"preset": self.preset, "model": self.model.to_dict(),
            "task": self.task.to_dict(), "train": self.train.to_dict()}

  @classmethod
  def from_dict(cls, d: dict) -> "RunConfig":
    return cls(d["preset"], ModelConfig.from_dict(d["model"]), TaskConfig(**d["task"]),
               TrainConfig(**d["train"]))


def task_config(preset: str, task: str, data_seed: int = 0) -> TaskConfig:
  """The task generator config of ``preset`` (the same for every PE)."""
  if preset not in PRESET_NAMES:
    raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESET_NAMES)}")
  if (preset, task) not in TASK_PRESETS:
    have = sorted(t for (p, t) in TASK_PRESETS if p == preset)
    raise ValueError(f"preset {preset!r} has no task {task!r}; it has: {', '.join(have)}")
  return TaskConfig(name=task, data_seed=data_seed, **TASK_PRESETS[(preset, task)])


# ``overrides`` of :func:`build` set any config field, except those that one
# of build's own arguments sets (the programs give each a flag of the same
# name) and those that follow from other fields.
SECTIONS = {"model": ModelConfig, "task": TaskConfig, "train": TrainConfig}
BUILD_ARGUMENTS = {
    ("model", "pe"): "pe", ("model", "faithful"): "faithful",
    ("model", "pe_options.heads"): "rope_heads", ("model", "pe_options.slopes"): "alibi_slopes",
    ("model", "random_positions"): "random_positions",
    ("model", "attention_block"): "attention_block", ("model", "remat"): "remat",
    ("model", "attention_impl"): "attention_impl",
    ("model", "dtype"): "dtype", ("model", "pe_module"): "pe_module",
    ("task", "name"): "task", ("task", "data_seed"): "data_seed", ("task", "corpus"): "data",
    ("train", "epochs"): "epochs", ("train", "steps"): "steps",
    ("train", "batch_size"): "batch_size", ("train", "learning_rate"): "learning_rate",
}
_DERIVED = {
    ("model", "pe_options"): "set its fields: pe_options.<field>",
    ("model", "vocab_size"): "it follows task.vocab_size",
    ("model", "num_classes"): "it follows the task's labels",
    ("model", "per_token"): "it follows the task (lm: a language model's head)",
}
_NOT_OVERRIDABLE = {**{k: f"use build()'s {a} argument" for k, a in BUILD_ARGUMENTS.items()},
                    **_DERIVED}


class OverrideError(ValueError):
  """A config field an override cannot set, or a value it cannot take:
  ``section``, ``name``, and ``argument`` (the :func:`build` argument that
  sets the field instead, or None)."""

  def __init__(self, message: str, section: str, name: str):
    super().__init__(message)
    self.section, self.name = section, name
    self.argument = BUILD_ARGUMENTS.get((section, name))


@functools.lru_cache(maxsize=None)
def field_types() -> dict:
  """``{(section, field): (type, optional)}`` of every field of the three
  configs, resolved from their annotations (``typing.get_type_hints``):
  ``Optional[int]`` is ``(int, True)``."""
  out = {}

  def add(sec, cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
      hint = hints[f.name]
      args = typing.get_args(hint)
      optional = type(None) in args
      base = next(a for a in args if a is not type(None)) if optional else hint
      out[(sec, prefix + f.name)] = (base, optional)

  for sec, cls in SECTIONS.items():
    add(sec, cls)
  # the PEs' options, one flag per field (``pe_options.<field>``); a field
  # name means one thing in every options type that has it
  for kind in _option_types():
    add("model", kind, "pe_options.")
  return out


def _option_types() -> list:
  kinds = {encodings.get(p).options_type for p in encodings.names()} - {None}
  return sorted(kinds, key=lambda k: k.__name__)


def config_fields() -> dict:
  """``{(section, field): type text}`` (e.g. ``"Optional[int]"``) of every
  field of the three configs."""
  name = lambda t: getattr(t, "__name__", str(t))
  return {k: f"Optional[{name(t)}]" if opt else name(t)
          for k, (t, opt) in field_types().items()}


def not_overridable_reason(section: str, name: str) -> str:
  """Why an override cannot set ``<section>.<name>`` (e.g. "use build()'s
  epochs argument")."""
  return _NOT_OVERRIDABLE.get((section, name), "no such field")


def overridable_fields() -> dict:
  """``{(section, field): type text}`` of every field an override sets."""
  return {k: t for k, t in config_fields().items() if k not in _NOT_OVERRIDABLE}


def parse_override(section: str, name: str, text: str):
  """The typed value of the override ``<section>.<name>=<text>``;
  :class:`OverrideError` (one line naming the field) for a field that cannot
  be set or a bad value."""
  flag = f"{section}.{name}"
  if (section, name) in _NOT_OVERRIDABLE:
    raise OverrideError(f"{flag} cannot be set: {_NOT_OVERRIDABLE[(section, name)]}",
                        section, name)
  if (section, name) not in overridable_fields():
    raise OverrideError(f"{flag}: no such field", section, name)
  base_type, optional = field_types()[(section, name)]
  base = getattr(base_type, "__name__", str(base_type))
  t = text.strip()
  if optional and t.lower() in ("none", "null"):
    return None
  try:
    if base == "bool":
      if t.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError
      return t.lower() in ("true", "1", "yes")
    if base == "int":
      return int(t)
    if base == "float":
      return float(t)
    if base == "str":
      return t
  except ValueError:
    pass
  else:
    raise OverrideError(f"{flag}: unsupported field type {config_fields()[(section, name)]}",
                        section, name)
  raise OverrideError(f"{flag} takes {'an ' if base == 'int' else 'a '}{base}"
                      f"{' or none' if optional else ''}, got {text!r}", section, name)


def build(preset: str, task: str, pe: str, *, faithful: bool = False,
          rope_heads: Optional[int] = None, data_seed: int = 0,
          epochs: Optional[int] = None, steps: Optional[int] = None,
          batch_size: Optional[int] = None,
          learning_rate: Optional[float] = None,
          alibi_slopes: Optional[str] = None,
          random_positions: Optional[int] = None,
          attention_block: Optional[int] = None,
          remat: Optional[bool] = None,
          dtype: Optional[str] = None,
          attention_impl: Optional[str] = None,
          pe_module: Optional[str] = None,
          data: Optional[str] = None,
          overrides: Optional[dict] = None) -> RunConfig:
  """Builds validated configs; raises ValueError with a clear message.
  ``random_positions``: train and evaluate with randomized positions drawn
  below it; ``attention_block``, ``remat``: the memory options;
  ``attention_impl``: the softmax-attention code (``ModelConfig``; training
  with dropout on the attention probabilities refuses the library's); ``dtype``:
  ``"float32"`` (the default, recorded as None) or ``"bfloat16"`` (mixed
  precision; :class:`~pe_spectral.nn.model.ModelConfig`); ``overrides``:
  ``{section: {field: value}}`` (typed, :func:`parse_override`) applied to the
  preset's values before validation, e.g. ``{"model": {"d_model": 96}}``;
  ``pe_module``: the researcher's module that registers ``pe``
  (:func:`encodings.load_module`), loaded first and recorded; ``data``: the
  ``lm`` task's corpus (``corpus.load``: a path, a glob or ``hf:NAME``)."""
  if pe_module is not None:
    encodings.load_module(pe_module)
  overrides = overrides or {}
  for section, fields in overrides.items():
    for name in fields:
      if section not in SECTIONS or (section, name) not in overridable_fields():
        parse_override(section, name, "")  # raises the one-line reason
  if preset not in PRESET_NAMES:
    raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESET_NAMES)}")
  task_cfg = task_config(preset, task, data_seed)
  if data is not None:
    if not task_cfg.is_lm:
      raise ValueError(f"data (a corpus) is for the lm task, not {task!r}")
    task_cfg = task_cfg.replace(corpus=data)
  if overrides.get("task"):
    task_cfg = task_cfg.replace(**overrides["task"])
  if faithful and (task_cfg.name in STRING_TASKS or task_cfg.is_lm):
    raise ValueError(f"faithful mode reproduces the paper's scripts, which have the distance "
                     f"and count tasks only, not {task_cfg.name!r}")
  train_kw = train_settings(preset, pe, faithful, task)
  train_kw.update(overrides.get("train", {}))
  for name, val in (("epochs", epochs), ("steps", steps),
                    ("batch_size", batch_size), ("learning_rate", learning_rate)):
    if val is not None:
      train_kw[name] = val
  train_cfg = TrainConfig(**train_kw)
  num_classes = task_cfg.vocab_size if faithful else task_cfg.num_labels
  model_kw = dict(MODEL_PRESETS[preset])
  model_kw.update(TASK_MODEL_PRESETS.get((preset, task), {}))
  if task_cfg.is_lm:  # next-token prediction: causal attention, logits at every position
    model_kw.update(causal=True, per_token=True)
  elif encodings.get(pe).causal_only:
    model_kw["causal"] = True  # a PE defined causally only (PaTH): set, so recorded
  options = {}  # pe_options' fields; ModelConfig says whether the PE takes them
  if rope_heads is not None:
    options["heads"] = rope_heads
  if alibi_slopes is not None:
    options["slopes"] = alibi_slopes
  if dtype not in (None, "float32", "bfloat16"):
    raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
  for name, val in (("random_positions", random_positions),
                    ("attention_block", attention_block), ("remat", remat or None),
                    ("attention_impl", attention_impl), ("pe_module", pe_module),
                    ("dtype", None if dtype == "float32" else dtype)):
    if val is not None:
      model_kw[name] = val
  for name, val in overrides.get("model", {}).items():
    if name.startswith("pe_options."):
      options[name[len("pe_options."):]] = val
    else:
      model_kw[name] = val
  if options:
    model_kw["pe_options"] = options
  model_cfg = ModelConfig(pe=pe, vocab_size=task_cfg.vocab_size,
                          num_classes=num_classes, faithful=faithful, **model_kw)
  if model_cfg.attention_impl is not None and model_cfg.drops_attention_probs:
    raise ValueError(f"attention_impl={model_cfg.attention_impl!r} "
                     f"(jax.nn.dot_product_attention) has no dropout on the attention "
                     f"probabilities, which this run trains with at rate {model_cfg.dropout}; "
                     f"set model.dropout=0 or keep attention_impl='own'")
  if task_cfg.max_len > model_cfg.max_len:
    raise ValueError(f"task max_len {task_cfg.max_len} exceeds model max_len "
                     f"{model_cfg.max_len}")
  train_cfg.steps_per_epoch(task_cfg.num_train)  # batch fits the train split
  return RunConfig(preset, model_cfg, task_cfg, train_cfg)


def is_workdir(workdir) -> bool:
  """Whether ``workdir`` is a sweep workdir (it holds ``config.json``)."""
  return bool(workdir) and os.path.exists(os.path.join(workdir, "config.json"))


# ---------------------------------------------------------------------------
# One run's identity.

# Fields a run's name labels briefly, right after the PE (the names workdirs
# have always had: ``partial_rope-k1``, ``rope-rp1024``).
_NAME_PREFIXES = {("model", "pe_options.heads"): "k", ("model", "random_positions"): "rp"}
# build() arguments that choose how a run computes, not what it computes: they
# are not part of a run's identity (a resume may change them).
HOW_TO_COMPUTE = ("attention_block", "remat", "dtype", "attention_impl")


def _settable_fields() -> set:
  """``(section, field)`` of every field a :class:`RunSpec` may set: the
  overridable ones and those a :func:`build` argument sets, bar the PE, the
  task, the mode and the memory options (the spec's own fields, or not
  identity)."""
  # (a researcher's PE module is where the PE comes from: its name says it)
  own = {("model", "pe"), ("model", "faithful"), ("model", "pe_module"), ("task", "name")}
  how = {k for k, a in BUILD_ARGUMENTS.items() if a in HOW_TO_COMPUTE}
  return (set(overridable_fields()) | set(BUILD_ARGUMENTS)) - own - how


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run: a preset's task, PE and mode, and the typed config fields set
  away from the preset's values (``settings``: ``(section, field, value)``,
  e.g. ``("model", "pe_options.heads", 1)`` for RoPE on one head or
  ``("model", "dropout", 0.0)``). Its :attr:`name` names its workdir
  (``<pe>[-k<heads>][-rp<n>][-faithful][-<preset>][-<tag> | -<field><value>...]``,
  the preset left out when it is ``cpu``) and :meth:`run_id` is
  ``<task>/<name>``: the sweep's default workdir, a study's plan and its rules
  all name a run so. ``tag`` names the non-prefix settings in one word
  instead of listing them; it is not part of what the run trains, so two
  specs that differ only in it are equal."""
  task: str
  pe: str
  preset: str = "cpu"
  faithful: bool = False
  settings: tuple = ()
  tag: str = dataclasses.field(default="", compare=False)

  def __post_init__(self):
    settable = _settable_fields()
    seen = set()
    for section, name, _ in self.settings:
      if (section, name) not in settable:
        raise ValueError(f"a run spec cannot set {section}.{name}")
      if (section, name) in seen:
        raise ValueError(f"a run spec sets {section}.{name} twice")
      seen.add((section, name))
    object.__setattr__(self, "settings", tuple(sorted(self.settings, key=lambda s: s[:2])))

  @classmethod
  def of(cls, task: str, pe: str, *, preset: str = "cpu", faithful: bool = False,
         settings: Optional[dict] = None, tag: str = "") -> "RunSpec":
    """From ``settings`` as ``{"section.field": value}`` (values typed, or
    text that :func:`parse_override` reads; None values are left out)."""
    out = []
    for key, value in (settings or {}).items():
      section, name = key.split(".", 1)
      if isinstance(value, str) and (section, name) in overridable_fields():
        value = parse_override(section, name, value)
      if value is not None:
        out.append((section, name, value))
    return cls(task, pe, preset, faithful, tuple(out), tag)

  def get(self, key: str, default=None):
    """A setting's value by ``"section.field"``, or ``default``."""
    return next((v for s, n, v in self.settings if f"{s}.{n}" == key), default)

  @property
  def variant(self) -> dict:
    """``{"section.field": value}`` of the settings other than the PE's
    options (those the PE's label names)."""
    return {f"{s}.{n}": v for s, n, v in self.settings if not n.startswith("pe_options.")}

  @property
  def name(self) -> str:
    name = self.pe
    for field, prefix in _NAME_PREFIXES.items():
      value = self.get(".".join(field))
      if value is not None:
        name += f"-{prefix}{value}"
    if self.faithful:
      name += "-faithful"
    if self.preset != "cpu":
      name += f"-{self.preset}"
    if self.tag:
      return f"{name}-{self.tag}"
    shared = collections.Counter(n for (_, n) in _settable_fields())
    for section, field, value in self.settings:
      if (section, field) == ("task", "corpus"):  # a path or hf:NAME: a name's word
        value = re.sub(r"[^A-Za-z0-9.]+", "_", str(value)).strip("_")[-40:]
      if (section, field) not in _NAME_PREFIXES:
        short = field.rsplit(".", 1)[-1]  # pe_options.gamma -> gamma
        name += f"-{section}.{field}{value}" if shared[field] > 1 else f"-{short}{value}"
    return name

  def run_id(self) -> str:
    return f"{self.task}/{self.name}"

  def build(self, **how) -> RunConfig:
    """The run's validated configs (:func:`build`); ``how``: the memory and
    precision options of :data:`HOW_TO_COMPUTE`, and ``pe_module`` (the
    module that registers a researcher's PE)."""
    if set(how) - set(HOW_TO_COMPUTE) - {"pe_module"}:
      raise TypeError(f"RunSpec.build takes only {', '.join(HOW_TO_COMPUTE)}, pe_module")
    kwargs, overrides = dict(how), {}
    for section, field, value in self.settings:
      argument = BUILD_ARGUMENTS.get((section, field))
      if argument:
        kwargs[argument] = value
      else:
        overrides.setdefault(section, {})[field] = value
    return build(self.preset, self.task, self.pe, faithful=self.faithful,
                 overrides=overrides, **kwargs)

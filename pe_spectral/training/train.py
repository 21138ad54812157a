"""Pure training and evaluation steps, chunked and vmapped over seeds.

``make_steps(model_cfg, task_cfg, train_cfg, num_train)`` returns a
:class:`Steps`: an immutable bundle of pure functions (``init``, ``chunk``,
``evaluate``, ``evaluate_params``, ``loss``, ``score``) that callers jit and
vmap; ``jit_init``/``jit_chunk``/``jit_evaluate`` are the compiled programs,
cached on the frozen configs. Device placement lives in ``devices.py``.

A run is ``init`` (one parameter set per seed, ``jax.vmap`` over keys), then a
Python loop over *chunks*: each chunk is one compiled ``lax.scan`` over K
optimizer steps, ``jax.jit(jax.vmap(...))`` over the seed axis, so every seed
of a sweep runs in one program. Batch order and dropout keys are functions of
``(seed, step)`` only (``fold_in``), so a run resumed from a checkpoint replays
exactly. With several devices the seed axis is sharded with
``jax.make_mesh`` + ``NamedSharding`` (``devices.py``).

Loss/accuracy rules (``LabelRule``):

* clean: classes are the task's label range (``label - label_min``), every
  example counts;
* faithful (paper): the head has ``vocab_size`` outputs, class = raw label,
  examples with label 0 are ignored in loss and accuracy -- unless the run's
  script counts them (``ScriptQuirks.counts_label_zero``: the paper's MLA
  script; docs/protocol.md).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pe_spectral.data.tasks import TaskConfig
from pe_spectral.nn import model as model_lib
from pe_spectral.runtime import devices, speed
from pe_spectral.runtime.devices import seed_mesh, wait_ready  # noqa: F401  (re-exported)

__all__ = ["TrainConfig", "LabelRule", "label_rule", "lr_schedule", "wait_ready", "Steps",
           "make_steps", "seed_keys", "finite", "jit_init", "jit_chunk", "jit_evaluate",
           "seed_mesh"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimiser and loop settings (defaults: the paper's trans.py)."""
  learning_rate: float = 1e-4
  b1: float = 0.98
  b2: float = 0.9
  eps: float = 1e-8
  weight_decay: float = 1e-5
  warmup_frac: float = 0.06
  batch_size: int = 512
  epochs: int = 100
  steps: Optional[int] = None       # overrides epochs when set
  eval_batch_size: int = 1024
  train_eval_examples: int = 4096   # train accuracy: fixed subset, eval mode

  def __post_init__(self):
    if self.batch_size < 1 or self.eval_batch_size < 1:
      raise ValueError("batch sizes must be >= 1")
    if self.epochs < 1:
      raise ValueError(f"epochs must be >= 1, got {self.epochs}")
    if self.steps is not None and self.steps < 1:
      raise ValueError(f"steps must be >= 1, got {self.steps}")
    if not 0.0 <= self.warmup_frac < 1.0:
      raise ValueError("warmup_frac must be in [0, 1)")
    if not math.isfinite(self.learning_rate) or self.learning_rate < 0:
      raise ValueError(f"learning_rate must be finite and >= 0, got {self.learning_rate}")
    if 0 < self.learning_rate < np.finfo(np.float32).tiny:
      # The schedule and the update run in float32: below its smallest normal
      # number the rate flushes to 0 or loses all precision, and nothing trains.
      warnings.warn(f"learning_rate {self.learning_rate:g} underflows in float32 (smallest "
                    f"normal {np.finfo(np.float32).tiny:.3g}): the parameters will not move",
                    stacklevel=3)

  def steps_per_epoch(self, num_train: int) -> int:
    if self.batch_size > num_train:
      raise ValueError(f"batch_size {self.batch_size} exceeds the "
                       f"{num_train} training examples")
    return num_train // self.batch_size  # the last partial batch is dropped

  def total_steps(self, num_train: int) -> int:
    if self.steps is not None:
      return self.steps
    return self.epochs * self.steps_per_epoch(num_train)

  def replace(self, **kw) -> "TrainConfig":
    return dataclasses.replace(self, **kw)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LabelRule:
  """Maps raw task labels to (class index, counts-in-loss) pairs."""
  num_classes: int
  offset: int
  ignore_zero: bool

  def targets(self, labels):
    labels = jnp.asarray(labels, jnp.int32)
    valid = (labels != 0) if self.ignore_zero else jnp.ones_like(labels, bool)
    return labels - self.offset, valid


def label_rule(task: TaskConfig, model_cfg: model_lib.ModelConfig) -> LabelRule:
  """The paper's rule in faithful mode, the clean rule otherwise (``lm``: the
  class is the next token's id)."""
  if task.is_lm and not model_cfg.per_token:
    raise ValueError("task 'lm' needs a model with per_token logits")
  if model_cfg.faithful:
    if model_cfg.num_classes <= task.label_max:
      raise ValueError("faithful mode: num_classes must exceed the largest label")
    return LabelRule(model_cfg.num_classes, 0,
                     ignore_zero=not model_cfg.quirks.counts_label_zero)
  return LabelRule(task.num_labels, task.label_min, ignore_zero=False)


def lr_schedule(cfg: TrainConfig, total_steps: int):
  """The paper's LambdaLR: linear warm-up from 0, then cosine to 0.

  ``factor(s) = s / W`` for ``s < W`` else ``0.5 (1 + cos(pi (s - W) / (T - W)))``,
  ``W = int(warmup_frac * T)``; ``s`` counts updates from 0 (optax's count),
  so the very first update has learning rate 0, as in the paper.

  The cosine and the join are optax's (``cosine_decay_schedule``,
  ``join_schedules``), as factors that multiply the rate last, as LambdaLR
  does. The warm-up factor is written here: optax's ``linear_schedule``
  interpolates ``lr - lr (1 - s / W)``, which rounds differently from
  ``lr * (s / W)`` (one float32 ulp on 20 of the ``cpu`` preset's 52 warm-up
  steps), and would move every run off the bit-exact numbers recorded here.
  """
  warmup = int(cfg.warmup_frac * total_steps)
  factor = optax.join_schedules(
      [lambda count: jnp.asarray(count, jnp.float32) / max(warmup, 1),
       optax.cosine_decay_schedule(1.0, max(total_steps - warmup, 1))], [warmup])
  return lambda count: cfg.learning_rate * factor(count)


@dataclasses.dataclass(frozen=True)
class Steps:
  """The pure functions of one (model, task, train) configuration.

  Build it with :func:`make_steps`. It holds only frozen configuration and
  what follows from it (the label rule, the optimiser, the model's graph
  definition); every per-seed value (parameters, optimiser state, keys) is an
  argument. Nothing here is jitted or placed on a device: callers jit and vmap
  the functions (:func:`jit_init`, :func:`jit_chunk`, :func:`jit_evaluate`
  are the cached programs the runner uses), as purejaxrl's ``make_train``
  leaves ``jax.jit(jax.vmap(train))`` to its caller.

  ``seed_group``: vmap this many seeds at a time in :meth:`chunk` and
  :meth:`evaluate`, the groups one after another in the same program (None:
  all at once).
  """
  model_cfg: model_lib.ModelConfig
  task_cfg: TaskConfig
  train_cfg: TrainConfig
  num_train: int
  seed_group: Optional[int] = None
  # derived from the fields above (not part of equality or the hash)
  rule: LabelRule = dataclasses.field(init=False, compare=False, repr=False)
  steps_per_epoch: int = dataclasses.field(init=False, compare=False, repr=False)
  total_steps: int = dataclasses.field(init=False, compare=False, repr=False)
  tx: Any = dataclasses.field(init=False, compare=False, repr=False)
  graphdef: Any = dataclasses.field(init=False, compare=False, repr=False)

  def __post_init__(self):
    rule = label_rule(self.task_cfg, self.model_cfg)
    if self.model_cfg.num_classes != rule.num_classes:
      raise ValueError(
          f"model num_classes {self.model_cfg.num_classes} != {rule.num_classes} "
          f"required by the task's label rule")
    if self.seed_group is not None and self.seed_group < 1:
      raise ValueError(f"seed_group must be >= 1, got {self.seed_group}")
    tc = self.train_cfg
    total = tc.total_steps(self.num_train)
    derived = dict(
        rule=rule, steps_per_epoch=tc.steps_per_epoch(self.num_train), total_steps=total,
        tx=optax.adamw(lr_schedule(tc, total), b1=tc.b1, b2=tc.b2, eps=tc.eps,
                       weight_decay=tc.weight_decay),
        graphdef=jax.eval_shape(
            lambda: model_lib.init_model(self.model_cfg, jax.random.key(0)))[0])
    for name, value in derived.items():
      object.__setattr__(self, name, value)

  # -- init ------------------------------------------------------------------
  def init_one(self, seed):
    """One seed's train state ``{params, opt_state, step}`` from its key material."""
    key = jax.random.key(seed)
    params = model_lib.init_model(self.model_cfg, jax.random.fold_in(key, 0))[1]
    return {"params": params, "opt_state": self.tx.init(params),
            "step": jnp.zeros((), jnp.int32)}

  def init(self, seed_keys):
    """Per-seed train states stacked on a leading seed axis (:func:`seed_keys`)."""
    return jax.vmap(self.init_one)(seed_keys)

  def abstract_state(self, num_seeds: int, mesh=None):
    """Shape/dtype (and, with a ``mesh``, sharding) structure of :meth:`init`'s
    output for ``num_seeds`` seeds (what a checkpoint restores into)."""
    keys = jax.ShapeDtypeStruct((num_seeds,), jnp.uint32)
    shapes = jax.eval_shape(self.init, keys)
    if mesh is None:
      return shapes
    sharding = devices.seed_sharding(mesh)
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes)

  # -- loss and one step -----------------------------------------------------
  def score(self, logits, labels, real=None):
    """``(correct, summed CE, count)`` over the examples that count: the label
    rule's valid ones, and (if given) only where ``real`` is True."""
    targets, valid = self.rule.targets(labels)
    if real is not None:  # one flag per example: every target of it (lm: each token)
      valid = valid & real.reshape(real.shape + (1,) * (valid.ndim - real.ndim))
    w = valid.astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits, jnp.clip(targets, 0, logits.shape[-1] - 1))
    return ((jnp.argmax(logits, -1) == targets) * w).sum(), (ce * w).sum(), w.sum()

  def loss(self, params, ids, labels, dropout_key=None, head_mask=None):
    """Mean CE over counted examples, and (correct, counted) tallies."""
    logits = model_lib.apply_model(self.graphdef, params, ids,
                                   dropout_key=dropout_key, head_mask=head_mask)
    correct, ce_sum, count = self.score(logits, labels)
    return ce_sum / jnp.maximum(count, 1.0), (correct, count)

  def train_step(self, state, ids, labels, dropout_key):
    """One AdamW update. Returns (new state, loss)."""
    grad_fn = jax.value_and_grad(self.loss, has_aux=True)
    (loss, _), grads = grad_fn(state["params"], ids, labels, dropout_key)
    updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    return {"params": params, "opt_state": opt_state,
            "step": state["step"] + 1}, loss

  # -- a chunk of steps ------------------------------------------------------
  def windows(self, key, tokens):
    """``lm``: one training batch of ``batch_size`` windows drawn from the flat
    token array ``tokens`` at uniform offsets (``key``): ``(ids, next ids)``,
    each ``int32 [batch, seq_len]``."""
    length = self.task_cfg.seq_len
    starts = jax.random.randint(key, (self.train_cfg.batch_size,), 0,
                                tokens.shape[0] - length)
    w = tokens[starts[:, None] + jnp.arange(length + 1)].astype(jnp.int32)
    return w[:, :-1], w[:, 1:]

  @staticmethod
  def split_window(ids, labels):
    """An evaluation batch of ``lm`` windows ``[b, seq_len + 1]``: (inputs,
    next tokens)."""
    return ids[:, :-1], ids[:, 1:]

  def chunk_one(self, state, seed, train_ids, train_labels, num_steps: int):
    """``num_steps`` steps of one seed, from ``state['step']`` (a ``lax.scan``).
    Returns (state, losses ``[num_steps]``, each measured before its update).
    ``lm``: ``train_ids`` is the flat token array and each step's windows come
    from ``fold_in(order key, step)`` (:meth:`windows`)."""
    key = jax.random.key(seed)
    spe, batch = self.steps_per_epoch, self.train_cfg.batch_size
    n = train_ids.shape[0]
    order_key = jax.random.fold_in(key, 1)
    dropout_root = jax.random.fold_in(key, 2)
    if self.task_cfg.is_lm:
      def lm_body(st, _):
        step = st["step"]
        ids, nxt = self.windows(jax.random.fold_in(order_key, step), train_ids)
        return self.train_step(st, ids, nxt, jax.random.fold_in(dropout_root, step))
      return jax.lax.scan(lm_body, state, None, length=num_steps)
    step0 = state["step"]
    first_epoch = step0 // spe
    num_epochs = num_steps // spe + 2  # epochs a chunk can touch
    perms = jax.vmap(lambda e: jax.random.permutation(
        jax.random.fold_in(order_key, first_epoch + e), n))(jnp.arange(num_epochs))

    def body(st, _):
      step = st["step"]
      row = perms[step // spe - first_epoch]
      idx = jax.lax.dynamic_slice(row, ((step % spe) * batch,), (batch,))
      st, loss = self.train_step(st, train_ids[idx], train_labels[idx],
                                 jax.random.fold_in(dropout_root, step))
      return st, loss

    return jax.lax.scan(body, state, None, length=num_steps)

  def chunk(self, states, keys, train_ids, train_labels, num_steps: int):
    """:meth:`chunk_one` for every seed: (states, losses ``[seeds, num_steps]``)."""
    run = lambda a: jax.vmap(self.chunk_one, in_axes=(0, 0, None, None, None))(
        *a, train_ids, train_labels, num_steps)
    # Groups of g vmapped seeds, one group after another in the same program:
    # on XLA:CPU a wide vmap turns every dense matmul into a slower batched
    # dot, and one seed's step is already compute-bound (benchmarks/README.md);
    # on an accelerator, groups bound the memory (auto_seed_group).
    return self.by_seed_group(run, (states, keys))

  def by_seed_group(self, run, tree, on_group=None):
    """``run(tree)`` over the leading seed axis, ``seed_group`` seeds vmapped at
    a time and the groups one after another (``lax.map``); all at once without
    a group. ``on_group(done, total)``: a host callback after each group's
    results exist (progress on long work; not called without groups)."""
    n, g = jax.tree.leaves(tree)[0].shape[0], self.seed_group
    if g is None or g >= n:
      return run(tree)
    if n % g:
      raise ValueError(f"seed_group {g} does not divide the {n} seeds")
    split = lambda x: x.reshape((n // g, g) + x.shape[1:])
    merge = lambda x: x.reshape((n,) + x.shape[2:])
    if on_group is None:
      return jax.tree.map(merge, jax.lax.map(run, jax.tree.map(split, tree)))

    def body(q_i):
      q, i = q_i
      out = run(q)
      # the group's first output as an argument: the callback runs after it
      jax.debug.callback(lambda i, _: on_group(int(i) + 1, n // g), i,
                         jax.tree.leaves(out)[0])
      return out
    groups = (jax.tree.map(split, tree), jnp.arange(n // g))
    return jax.tree.map(merge, jax.lax.map(body, groups))

  # -- evaluation ------------------------------------------------------------
  def eval_batches(self, ids, labels):
    """``(ids [nb, bs, seq], labels [nb, bs], real [nb, bs])``: the data padded to
    whole evaluation batches; ``real`` marks the examples that count."""
    bs = self.train_cfg.eval_batch_size
    n = ids.shape[0]
    nb = -(-n // bs)
    pad = nb * bs - n
    return (jnp.pad(ids, ((0, pad), (0, 0))).reshape(nb, bs, -1),
            jnp.pad(labels, (0, pad)).reshape(nb, bs),
            (jnp.arange(nb * bs) < n).reshape(nb, bs))

  def eval_position_key(self, batch_index):
    """The randomized positions' key of evaluation batch ``batch_index`` (the
    same for every seed, evaluation and ablation, so runs compare on the same
    draws); None without ``random_positions``."""
    if self.model_cfg.random_positions is None:
      return None
    return jax.random.fold_in(jax.random.key(0x5EED), batch_index)

  def evaluate_params(self, params, ids, labels, head_mask=None, freq_mask=None):
    """``(accuracy, mean loss)`` of ONE seed's ``params`` on ``(ids, labels)`` in
    eval mode (no dropout), optionally with ``head_mask [layers, heads]``
    scaling each head's output and ``freq_mask [layers, heads, head_dim/2]``
    scaling each rotary pair's angle (the ablation vmaps it over masks,
    :meth:`evaluate` over seeds)."""
    ids_b, labels_b, real_b = self.eval_batches(ids, labels)

    def one(args):
      x, y, real, b = args
      if self.task_cfg.is_lm:
        x, y = self.split_window(x, y)
      logits = model_lib.apply_model(self.graphdef, params, x, head_mask=head_mask,
                                     freq_mask=freq_mask,
                                     position_key=self.eval_position_key(b))
      return self.score(logits, y, real)

    correct, loss_sum, count = jax.lax.map(
        one, (ids_b, labels_b, real_b, jnp.arange(ids_b.shape[0])))
    count = jnp.maximum(count.sum(), 1.0)
    return correct.sum() / count, loss_sum.sum() / count

  def evaluate(self, params, ids, labels):
    """(accuracy ``[seeds]``, mean loss ``[seeds]``) of seed-stacked ``params``."""
    run = lambda p: jax.vmap(self.evaluate_params, in_axes=(0, None, None))(p, ids, labels)
    return self.by_seed_group(run, params)


@functools.lru_cache(maxsize=128)
def make_steps(model_cfg: model_lib.ModelConfig, task_cfg: TaskConfig,
               train_cfg: TrainConfig, num_train: int, *,
               seed_group: Optional[int] = None) -> Steps:
  """The :class:`Steps` of a configuration, one object per distinct set of
  frozen configs (cached), so the programs cached on it compile once."""
  return Steps(model_cfg, task_cfg, train_cfg, num_train, seed_group)


def seed_keys(seeds) -> jax.Array:
  """The per-seed key material: a ``uint32 [num_seeds]`` array.

  Kept as plain integers (not typed keys) so it can be placed on a
  multi-process mesh; ``jax.random.key(seed)`` is formed inside the
  compiled per-seed functions.
  """
  return jnp.asarray(np.asarray(seeds, np.uint32))


def _finite(states) -> jax.Array:
  """``bool [seeds]``: every parameter and optimiser-state value of the seed is
  finite (checked on device before a checkpoint is saved)."""
  leaves = [x for x in jax.tree.leaves(states)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  n = leaves[0].shape[0]
  return jnp.stack([jnp.isfinite(x).reshape(n, -1).all(1) for x in leaves]).all(0)


finite = jax.jit(_finite)


# The compiled programs, cached on the frozen configs (the Steps) and on the
# speed layer's switch (speed.cache_per_path).
@speed.cache_per_path()
def _jitted(steps: Steps, name: str):
  if name == "chunk":
    return jax.jit(steps.chunk, static_argnames="num_steps", donate_argnums=(0,))
  return jax.jit(getattr(steps, name))


def jit_init(steps: Steps):
  """``jax.jit(steps.init)``, compiled once per configuration."""
  return _jitted(steps, "init")


def jit_chunk(steps: Steps):
  """``jax.jit(steps.chunk)`` (``num_steps`` static, the states donated: their
  buffers are reused), one program per seed count and chunk length."""
  return _jitted(steps, "chunk")


def jit_evaluate(steps: Steps):
  """``jax.jit(steps.evaluate)``: ``(params, ids, labels) -> (accuracy, loss)``
  per seed."""
  return _jitted(steps, "evaluate")

"""The paper's two synthetic tasks as jitted, key-driven generators.

* ``distance`` (Task 1): ``left + [A] + middle + [B] + right``, cut to
  ``seq_len`` tokens; label = len(middle) + 1. Each segment is drawn without
  replacement *within the segment* from all non-pad ids; the triggers A, B may
  recur as fillers (as in the paper), so a few labels are ambiguous.
* ``count`` (Task 2): ``k ~ U{0..count_max}`` trigger tokens (with replacement
  among ``num_triggers`` fixed ids) mixed with ``seq_len - k`` non-trigger
  fillers (with replacement), shuffled; label = k.

The vocabulary is integer ids ``1..vocab_size-1`` (a word-level stand-in for
the paper's 574-entry tokenizer; docs/protocol.md), 0 is padding. Triggers are
fixed by ``data_seed``; the dataset and its 70/30 split too.

Four length-generalisation tasks of Delétang et al. (2023) as used by Ruoss et
al. (2023, randomized positional encodings), each example of a length drawn
uniformly from ``min_len..seq_len`` (``lengthened`` fixes one test length),
written from their definitions:

* ``parity_check``: a string over {a, b} (ids 1, 2); label = (number of b's) mod 2.
* ``even_pairs``: a string over {a, b}; label = (number of "ab" and "ba"
  pairs) mod 2, i.e. 0 when the first symbol equals the last.
* ``cycle_navigation``: moves −1, 0, +1 (ids 1, 2, 3) on a cycle of 5 from 0;
  label = the final position.
* ``modular_arithmetic``: residues 0..4 (ids 1..5) alternating with
  operators +, −, × (ids 6, 7, 8), odd length (an even length drops its last
  token), no brackets, × before + and −; label = the value mod 5.

And one task on real text, ``lm``: next-token prediction (a causal language
model) on a byte-level corpus (``corpus.py``: by default the Python standard
library's source, split by file). Its :class:`Dataset` holds the training
split as one flat array of token ids (the training steps draw windows of
``seq_len + 1`` tokens from it with the run's keys) and fixed evaluation
windows of the validation and training splits; ``num_examples`` is the
number of windows an *epoch* counts (the evaluation interval), not a pass
over the corpus.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.data import corpus as corpus_lib

__all__ = ["TaskConfig", "Dataset", "generate", "lengthened", "shift_right", "TASKS",
           "STRING_TASKS", "MODULUS"]

# Delétang et al. (2023) / Ruoss et al. (2023): {task: (vocabulary size with
# padding, number of labels)}; every example's length is drawn from min_len..seq_len
STRING_TASKS = {"parity_check": (3, 2), "even_pairs": (3, 2), "cycle_navigation": (4, 5),
                "modular_arithmetic": (9, 5)}
MODULUS = 5  # cycle_navigation's cycle, modular_arithmetic's modulus (as the references)
TASKS = ("distance", "count", *STRING_TASKS, "lm")
_CHUNK = 8192  # examples per jitted generator call (bounds memory)


# The fields only one task reads (the rest apply to every task); a new task
# adds its own here.
DISTANCE_FIELDS = ("side_min", "side_max", "mid_min", "mid_max")
COUNT_FIELDS = ("num_triggers", "count_max")
STRING_FIELDS = ("min_len",)
LM_FIELDS = ("corpus", "eval_windows")
TASK_FIELDS = {"distance": DISTANCE_FIELDS, "count": COUNT_FIELDS,
               **{name: STRING_FIELDS for name in STRING_TASKS}, "lm": LM_FIELDS}


def recorded_fields(d: dict) -> dict:
  """A TaskConfig dict without the other tasks' generator fields
  (:data:`TASK_FIELDS`): what :meth:`TaskConfig.to_dict` records."""
  own = set(TASK_FIELDS.get(d.get("name"), ()))
  drop = {f for fields in TASK_FIELDS.values() for f in fields} - own
  return {k: v for k, v in d.items() if k not in drop}


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Every knob of a task. Defaults are the paper's Task 1 (``distance``)."""
  name: str = "distance"
  vocab_size: int = 574
  num_examples: int = 100_000
  seq_len: int = 120      # sentences are cut to this many tokens
  max_len: int = 128      # and right-padded with 0 to this length
  side_min: int = 1       # distance: left/right segment lengths
  side_max: int = 25
  mid_min: int = 1        # distance: middle segment length
  mid_max: int = 70
  num_triggers: int = 30  # count: trigger ids
  count_max: int = 100    # count: k ~ U{0..count_max}
  min_len: int = 1        # string tasks: lengths ~ U{min_len..seq_len}
  corpus: Optional[str] = None  # lm: the corpus (corpus.load; None: the standard library)
  eval_windows: int = 256  # lm: fixed windows each evaluation scores, per split
  train_frac: float = 0.7
  data_seed: int = 0

  def __post_init__(self):
    if self.name not in TASKS:
      raise ValueError(f"unknown task {self.name!r}; valid: {', '.join(TASKS)}")
    if self.num_examples < 2:
      raise ValueError("num_examples must be >= 2")
    if not 0.0 < self.train_frac < 1.0:
      raise ValueError("train_frac must be in (0, 1)")
    if self.seq_len > self.max_len:
      raise ValueError(f"seq_len ({self.seq_len}) exceeds max_len ({self.max_len})")
    fillers = self.vocab_size - 1
    if self.name == "lm":
      if self.vocab_size != corpus_lib.BYTE_VOCAB:
        raise ValueError(f"task 'lm' reads bytes: vocab_size {corpus_lib.BYTE_VOCAB} (256 "
                         f"bytes and the padding), got {self.vocab_size}")
      if self.seq_len < 1 or self.eval_windows < 1:
        raise ValueError("task 'lm' needs seq_len >= 1 and eval_windows >= 1")
    elif self.name in STRING_TASKS:
      vocab = STRING_TASKS[self.name][0]
      if self.vocab_size != vocab:
        raise ValueError(f"task {self.name!r} has vocab_size {vocab} (its symbols and the "
                         f"padding), got {self.vocab_size}")
      if not 1 <= self.min_len <= self.seq_len:
        raise ValueError(f"need 1 <= min_len <= seq_len, got min_len {self.min_len} and "
                         f"seq_len {self.seq_len}")
    elif self.name == "distance":
      if not 0 <= self.side_min <= self.side_max:
        raise ValueError("need 0 <= side_min <= side_max")
      if not 0 <= self.mid_min <= self.mid_max:
        raise ValueError("need 0 <= mid_min <= mid_max")
      if max(self.side_max, self.mid_max) > fillers:
        raise ValueError("segments are drawn without replacement: segment "
                         "lengths must not exceed vocab_size - 1")
      if self.side_max + self.mid_max + 2 > self.seq_len:
        raise ValueError(
            f"the second trigger could be cut off: side_max + mid_max + 2 = "
            f"{self.side_max + self.mid_max + 2} > seq_len = {self.seq_len}")
      if fillers < 2:
        raise ValueError("vocab_size must be >= 3")
    else:
      if self.count_max > self.seq_len:
        raise ValueError("count_max must be <= seq_len")
      if not 1 <= self.num_triggers < fillers:
        raise ValueError("need 1 <= num_triggers < vocab_size - 1")

  @property
  def label_min(self) -> int:
    return self.mid_min + 1 if self.name == "distance" else 0

  @property
  def label_max(self) -> int:
    if self.name == "lm":  # the next token
      return self.vocab_size - 1
    if self.name in STRING_TASKS:
      return STRING_TASKS[self.name][1] - 1
    return self.mid_max + 1 if self.name == "distance" else self.count_max

  @property
  def num_labels(self) -> int:
    return self.label_max - self.label_min + 1

  @property
  def num_train(self) -> int:
    """Training examples per epoch: the train split's size, or for ``lm``
    the windows an epoch counts (``num_examples``)."""
    if self.name == "lm":
      return self.num_examples
    return int(self.train_frac * self.num_examples)

  @property
  def is_lm(self) -> bool:
    """Whether this is next-token prediction (per-token targets, causal)."""
    return self.name == "lm"

  def replace(self, **kw) -> "TaskConfig":
    return dataclasses.replace(self, **kw)

  def to_dict(self) -> dict:
    """The fields that apply to this task (a distance run records no
    ``num_triggers``/``count_max``, a count run no segment ranges): what
    ``config.json`` records; ``TaskConfig(**d)`` regenerates the same data."""
    return recorded_fields(dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Dataset:
  """Generated data (device arrays). ``labels`` are raw task labels."""
  train_ids: jax.Array     # int32 [num_train, max_len]
  train_labels: jax.Array  # int32 [num_train]
  test_ids: jax.Array
  test_labels: jax.Array
  triggers: jax.Array      # int32 [2] or [num_triggers]
  # lm: train_ids is the training split's flat token array [n] (train_labels
  # empty), test_ids the validation windows [eval_windows, seq_len + 1] (labels
  # zeros), and these the training split's evaluation windows
  train_eval_ids: Optional[jax.Array] = None


def _segment(key, length_key, lo, hi, width, fillers):
  """Length ~ U{lo..hi} and ``width`` distinct filler ids (only the prefix is used)."""
  n = jax.random.randint(length_key, (), lo, hi + 1)
  # Distinct ids: the top-`width` of iid uniforms is a uniform draw without
  # replacement; fillers are ids 1..vocab-1.
  _, idx = jax.lax.top_k(jax.random.uniform(key, (fillers,)), width)
  return n, idx.astype(jnp.int32) + 1


def _distance_example(key, cfg: TaskConfig, triggers):
  ks = jax.random.split(key, 6)
  fillers = cfg.vocab_size - 1
  nl, left = _segment(ks[0], ks[1], cfg.side_min, cfg.side_max,
                      max(cfg.side_max, 1), fillers)
  nm, mid = _segment(ks[2], ks[3], cfg.mid_min, cfg.mid_max,
                     max(cfg.mid_max, 1), fillers)
  nr, right = _segment(ks[4], ks[5], cfg.side_min, cfg.side_max,
                       max(cfg.side_max, 1), fillers)
  p = jnp.arange(cfg.max_len)
  a_pos = nl
  b_pos = nl + 1 + nm
  end = jnp.minimum(b_pos + 1 + nr, cfg.seq_len)
  take = lambda seg, i: seg[jnp.clip(i, 0, seg.shape[0] - 1)]
  tok = jnp.where(p < a_pos, take(left, p), 0)
  tok = jnp.where(p == a_pos, triggers[0], tok)
  tok = jnp.where((p > a_pos) & (p < b_pos), take(mid, p - a_pos - 1), tok)
  tok = jnp.where(p == b_pos, triggers[1], tok)
  tok = jnp.where((p > b_pos) & (p < end), take(right, p - b_pos - 1), tok)
  return tok.astype(jnp.int32), (nm + 1).astype(jnp.int32)


def _count_example(key, cfg: TaskConfig, triggers, non_triggers):
  ks = jax.random.split(key, 4)
  k = jax.random.randint(ks[0], (), 0, cfg.count_max + 1)
  trig = triggers[jax.random.randint(ks[1], (cfg.seq_len,), 0, triggers.shape[0])]
  fill = non_triggers[jax.random.randint(ks[2], (cfg.seq_len,), 0,
                                         non_triggers.shape[0])]
  slots = jnp.where(jnp.arange(cfg.seq_len) < k, trig, fill)
  slots = jax.random.permutation(ks[3], slots)
  tok = jnp.zeros((cfg.max_len,), jnp.int32).at[:cfg.seq_len].set(slots)
  return tok, k.astype(jnp.int32)


def _string_example(key, cfg: TaskConfig):
  """One example of a string task: ``[max_len]`` ids (padded with 0) and its label."""
  k_len, k_sym = jax.random.split(key)
  n = jax.random.randint(k_len, (), cfg.min_len, cfg.seq_len + 1)
  p = jnp.arange(cfg.max_len)
  if cfg.name == "modular_arithmetic":
    n = n - (1 - n % 2)  # odd: residue (op residue)*
    k_res, k_op = jax.random.split(k_sym)
    residue = jax.random.randint(k_res, (cfg.max_len,), 0, MODULUS)
    op = jax.random.randint(k_op, (cfg.max_len,), 0, 3)  # +, -, *
    sym = jnp.where(p % 2 == 0, residue + 1, op + MODULUS + 1)
    label = _evaluate(residue, op, n)
  else:
    symbols = STRING_TASKS[cfg.name][0] - 1
    sym = jax.random.randint(k_sym, (cfg.max_len,), 1, symbols + 1)
    valid = p < n
    if cfg.name == "parity_check":
      label = jnp.sum((sym == 2) & valid) % 2
    elif cfg.name == "even_pairs":
      label = jnp.sum((sym[:-1] != sym[1:]) & (p[1:] < n)) % 2
    else:  # cycle_navigation: ids 1, 2, 3 move -1, 0, +1
      label = jnp.sum(jnp.where(valid, sym - 2, 0)) % MODULUS
  tok = jnp.where(p < n, sym, 0)
  return tok.astype(jnp.int32), label.astype(jnp.int32)


def _evaluate(residue, op, n):
  """``r_0 o_1 r_1 ... o_m r_m`` mod 5 for ``n = 2m + 1`` tokens (residues at
  even positions, operators 0/1/2 = +/-/* at odd ones; the rest ignored), × first:
  a running sum of finished terms and the term being multiplied."""
  r = residue[0::2]
  o = op[1::2]
  steps = min(r.shape[0] - 1, o.shape[0])

  def step(carry, j):
    total, term = carry
    live = 2 * j + 3 <= n  # operator j and residue j + 1 are in the string
    nxt = r[j + 1]
    mul = (term * nxt) % MODULUS
    new_total = jnp.where(o[j] == 2, total, (total + term) % MODULUS)
    new_term = jnp.where(o[j] == 2, mul, jnp.where(o[j] == 0, nxt, (-nxt) % MODULUS))
    return (jnp.where(live, new_total, total), jnp.where(live, new_term, term)), None

  (total, term), _ = jax.lax.scan(step, (jnp.int32(0), r[0]), jnp.arange(steps))
  return (total + term) % MODULUS


def _triggers(key, cfg: TaskConfig):
  n = 2 if cfg.name == "distance" else cfg.num_triggers
  perm = jax.random.permutation(key, cfg.vocab_size - 1) + 1
  return perm[:n].astype(jnp.int32), perm[n:].astype(jnp.int32)


def generate(cfg: TaskConfig, *, num_examples: Optional[int] = None) -> Dataset:
  """Generates the dataset of ``cfg`` (deterministic in ``cfg.data_seed``).

  Examples are produced by a jitted ``vmap`` in chunks of 8192 (100k examples
  take a few seconds on a CPU); the split is a seeded random 70/30 permutation.
  """
  if cfg.name == "lm":
    return _lm_dataset(cfg)
  return _synthetic(cfg, cfg.num_examples if num_examples is None else num_examples)


# One process often asks for the same dataset again (a comma list of workdirs
# of one task in ablate, decompose or lengths; a resume): each call traced and
# compiled its generator anew (about 0.7 s on a 2-core CPU). The arrays are
# immutable, so the same Dataset is handed out again.
@functools.lru_cache(maxsize=8)
def _synthetic(cfg: TaskConfig, n: int) -> Dataset:
  root = jax.random.key(cfg.data_seed)
  trig_key, ex_key, split_key = (jax.random.fold_in(root, i) for i in range(3))
  if cfg.name in STRING_TASKS:
    triggers, non_triggers = jnp.zeros((0,), jnp.int32), None
  else:
    triggers, non_triggers = _triggers(trig_key, cfg)

  if cfg.name in STRING_TASKS:
    one = lambda k: _string_example(k, cfg)
  elif cfg.name == "distance":
    one = lambda k: _distance_example(k, cfg, triggers)
  else:
    one = lambda k: _count_example(k, cfg, triggers, non_triggers)
  make_chunk = jax.jit(lambda c: jax.vmap(one)(
      jax.vmap(lambda i: jax.random.fold_in(ex_key, i))(c * _CHUNK + jnp.arange(_CHUNK))))

  ids, labels = [], []
  for c in range((n + _CHUNK - 1) // _CHUNK):
    t, y = make_chunk(c)
    ids.append(t)
    labels.append(y)
  ids = jnp.concatenate(ids)[:n]
  labels = jnp.concatenate(labels)[:n]
  perm = jax.random.permutation(split_key, n)
  n_train = int(cfg.train_frac * n)
  tr, te = perm[:n_train], perm[n_train:]
  return Dataset(ids[tr], labels[tr], ids[te], labels[te], triggers)


def lengthened(cfg: TaskConfig, seq_len: int) -> TaskConfig:
  """``cfg`` at a longer sequence length with the SAME label range (classes
  cannot extrapolate), for length-generalisation tests.

  * ``distance``: the middle segment (the label) keeps its range; the side
    segments may grow by ``seq_len - cfg.seq_len`` tokens each (at most to
    ``vocab_size - 1``: a segment's tokens are distinct), so the triggers sit
    further from the start and the sentence is longer.
  * ``count``: the same counts ``k <= count_max`` among ``seq_len`` tokens.
  * the string tasks: every example exactly ``seq_len`` long (``min_len =
    seq_len``; ``modular_arithmetic`` drops the last token of an even length).

  ``data_seed`` and the triggers are unchanged; the examples are new draws.
  """
  if seq_len < cfg.seq_len:
    raise ValueError(f"seq_len {seq_len} is shorter than the training length "
                     f"{cfg.seq_len}")
  extra = seq_len - cfg.seq_len
  kw = dict(seq_len=seq_len, max_len=max(cfg.max_len, seq_len))
  if cfg.name == "distance":
    kw["side_max"] = min(cfg.side_max + extra, cfg.vocab_size - 1)
  if cfg.name in STRING_TASKS:
    kw["min_len"] = seq_len
  return cfg.replace(**kw)


def shift_right(ids, shifts) -> np.ndarray:
  """Each row of ``ids [n, L]`` moved right by ``shifts[i]`` pad tokens (0),
  into ``[n, L + max(shifts)]``: the same content at later positions (only
  meaningful where padding is masked, i.e. clean mode)."""
  ids = np.asarray(ids)
  shifts = np.asarray(shifts, np.int64)
  n, length = ids.shape
  out = np.zeros((n, length + int(shifts.max(initial=0))), ids.dtype)
  cols = np.arange(length)[None, :] + shifts[:, None]
  out[np.arange(n)[:, None], cols] = ids
  return out


def trigger_ids(cfg: TaskConfig) -> np.ndarray:
  """The trigger ids of ``cfg`` (same as ``generate(cfg).triggers``)."""
  return np.asarray(_triggers(jax.random.fold_in(jax.random.key(cfg.data_seed), 0),
                              cfg)[0])


# ---------------------------------------------------------------------------
# The language-model task: windows of a corpus.

@functools.lru_cache(maxsize=4)
def load_corpus(spec: Optional[str]) -> corpus_lib.Corpus:
  """The corpus of a config (``TaskConfig.corpus``), read once per process."""
  return corpus_lib.load(spec)


def eval_windows(tokens, length: int, count: int) -> np.ndarray:
  """``count`` fixed windows of ``length + 1`` tokens of a flat split, evenly
  spaced over it: window ``i`` starts at a multiple of ``length``, so the
  windows' targets (every token but the first) never overlap -- each token is
  scored at most once. Fewer when the split holds fewer; a
  :class:`corpus.CorpusError` when it holds not one."""
  tokens = np.asarray(tokens)
  slots = (tokens.shape[0] - 1) // length
  if slots < 1:
    raise corpus_lib.CorpusError(
        f"a split of {tokens.shape[0]} tokens is shorter than one window of {length + 1}")
  pick = np.unique(np.linspace(0, slots - 1, min(count, slots)).round().astype(np.int64))
  return np.stack([tokens[s * length:s * length + length + 1] for s in pick])


def check_corpus(cfg: TaskConfig, length: Optional[int] = None) -> dict:
  """``lm``: the corpus's record (:meth:`corpus.Corpus.record`) once every
  split holds a window of ``length`` (default ``seq_len``) + 1 tokens; a
  :class:`corpus.CorpusError` otherwise. Reads the corpus (cached)."""
  c = load_corpus(cfg.corpus)
  need = (length or cfg.seq_len) + 1
  for split in corpus_lib.SPLITS:
    have = c.split(split).shape[0]
    if have < need:
      raise corpus_lib.CorpusError(
          f"corpus {c.source}: the {split} split has {have} tokens, fewer than one window "
          f"of {need}")
  return c.record()


def _lm_dataset(cfg: TaskConfig) -> Dataset:
  check_corpus(cfg)
  c = load_corpus(cfg.corpus)
  valid = jnp.asarray(eval_windows(c.valid, cfg.seq_len, cfg.eval_windows), jnp.int32)
  train = jnp.asarray(eval_windows(c.train, cfg.seq_len, cfg.eval_windows), jnp.int32)
  # the labels are the windows' own next tokens: a zero per window keeps the
  # (ids, labels) shapes every program takes
  return Dataset(train_ids=jnp.asarray(c.train), train_labels=jnp.zeros((1,), jnp.int32),
                 test_ids=valid, test_labels=jnp.zeros((valid.shape[0],), jnp.int32),
                 triggers=jnp.zeros((0,), jnp.int32), train_eval_ids=train)

"""The field's evaluations of a language model (task ``lm``): bits per byte
against context length, loss against token position, and passkey retrieval.

Pure functions of a run's graph definition, its seed-stacked parameters and
token windows; nothing here reads or writes files (``experiments/lengths.py``
does).

**Bits per byte at a length** ``n``: windows of ``n + 1`` tokens of the test
split, *disjoint* (window ``i`` starts at ``i·n``, so no token is scored twice)
and spread evenly over the split; every position of every window is scored
(position 0 with no context, as the training loss does). The mean negative
log-likelihood in nats over all scored tokens divided by ln 2 is bits per byte
(one token is one byte). The same numbers per position give **loss against
position** (ALiBi's figure).

**Passkey retrieval** (Mohtashami and Jaggi 2023, "Landmark attention"): a
five-digit number hidden in repeated filler text at a relative depth, then a
question; the model's own greedy continuation (argmax, one byte at a time)
must spell the number. The prompt, in bytes::

    There is an important info hidden inside a lot of irrelevant text. Find it
    and memorize it. I will quiz you about the important information there.
    <filler ...> The pass key is 12345. Remember it. 12345 is the pass key.
    <filler ...> What is the pass key? The pass key is

with the filler ``The grass is green. The sky is blue. The sun is yellow. Here
we go. There and back again. `` repeated and cut so the prompt has exactly the
length asked for; the needle sits at ``depth`` (0 = right after the
introduction, 1 = right before the question).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.data import corpus as corpus_lib
from pe_spectral.data import tasks
from pe_spectral.nn import model as model_lib

__all__ = ["test_windows", "position_nll", "bits_per_byte", "passkey_prompt",
           "greedy_continuation", "score_passkey", "passkey_accuracy", "passkey_min_length",
           "PASSKEY_INTRO", "PASSKEY_FILLER", "PASSKEY_QUESTION"]

LN2 = float(np.log(2.0))
PASSKEY_INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it "
                 "and memorize it. I will quiz you about the important information there. ")
PASSKEY_FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
                  "There and back again. ")
PASSKEY_QUESTION = "What is the pass key? The pass key is "


def test_windows(tokens, length: int, max_tokens: int) -> np.ndarray:
  """``[m, length + 1]`` disjoint windows of the flat split ``tokens``, evenly
  spread over it, ``m = max(1, max_tokens // length)`` (fewer if the split is
  shorter; :func:`tasks.eval_windows`, the same cut the evaluations use);
  :class:`corpus.CorpusError` if not one fits."""
  return tasks.eval_windows(tokens, length, max(1, max_tokens // length)).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("graphdef", "batch"))
def _position_nll(graphdef, params, windows, batch: int):
  """``[seeds, n]``: each position's NLL (nats) summed over the windows, the
  seeds one after another and the windows ``batch`` at a time."""
  m, n1 = windows.shape
  nb = m // batch
  groups = windows[:nb * batch].reshape(nb, batch, n1)

  def one_seed(p):
    def one_batch(w):
      logits = model_lib.apply_model(graphdef, p, w[:, :-1])
      logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
      nll = -jnp.take_along_axis(logp, w[:, 1:, None], -1)[..., 0]
      return nll.sum(0)
    return jax.lax.map(one_batch, groups).sum(0)

  return jax.lax.map(one_seed, params)


def position_nll(graphdef, params, windows, *, max_batch_tokens: int = 8192) -> np.ndarray:
  """``[seeds, n]`` mean NLL (nats) at each position over ``windows [m, n+1]``
  for seed-stacked ``params``. Windows run ``max_batch_tokens // n`` at a time
  (a remainder that would not fill a batch runs as a batch of its own)."""
  windows = np.asarray(windows, np.int32)
  m, n1 = windows.shape
  batch = max(1, min(m, max_batch_tokens // (n1 - 1)))
  full = (m // batch) * batch
  total = np.asarray(_position_nll(graphdef, params, jnp.asarray(windows[:full]), batch),
                     np.float64)
  if full < m:
    rest = windows[full:]
    total += np.asarray(_position_nll(graphdef, params, jnp.asarray(rest), rest.shape[0]),
                        np.float64)
  return total / m


def bits_per_byte(nll_by_position) -> np.ndarray:
  """Per seed: the mean over positions of :func:`position_nll`, in bits."""
  return np.asarray(nll_by_position, np.float64).mean(-1) / LN2


# -- passkey retrieval ---------------------------------------------------------

def passkey_min_length() -> int:
  """The shortest passkey prompt (no filler)."""
  return len(PASSKEY_INTRO) + len("The pass key is 00000. Remember it. 00000 is the pass key. ") \
      + len(PASSKEY_QUESTION)


def passkey_prompt(length: int, depth: float, key: str) -> tuple[np.ndarray, str]:
  """``(ids [length], answer)``: a byte prompt of exactly ``length`` tokens
  with the passkey needle at relative ``depth`` in [0, 1] of the filler
  (module docstring). ``ValueError`` if ``length`` cannot hold the
  introduction, the needle and the question."""
  if not 0.0 <= depth <= 1.0:
    raise ValueError(f"depth must be in [0, 1], got {depth}")
  if not (key.isdigit() and key.isascii()):
    raise ValueError(f"the passkey must be ASCII digits, got {key!r}")
  needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
  fixed = len(PASSKEY_INTRO) + len(needle) + len(PASSKEY_QUESTION)
  room = length - fixed
  if room < 0:
    raise ValueError(f"a passkey prompt needs at least {fixed} tokens, got {length}")
  filler = (PASSKEY_FILLER * (room // len(PASSKEY_FILLER) + 1))[:room]
  cut = int(round(depth * room))
  text = PASSKEY_INTRO + filler[:cut] + needle + filler[cut:] + PASSKEY_QUESTION
  ids = corpus_lib.encode(text).astype(np.int32)
  assert ids.shape[0] == length, (ids.shape, length)
  return ids, key


@functools.partial(jax.jit, static_argnames=("graphdef", "steps"))
def _greedy(graphdef, params, prompts, steps: int):
  """``[seeds, b, steps]`` argmax continuations: the window slides, so the
  model always sees ``prompts.shape[1]`` tokens (its evaluation length)."""
  def one_seed(p):
    def step(ids, _):
      nxt = jnp.argmax(model_lib.apply_model(graphdef, p, ids)[:, -1], -1).astype(jnp.int32)
      return jnp.concatenate([ids[:, 1:], nxt[:, None]], 1), nxt
    return jax.lax.scan(step, prompts, None, length=steps)[1].T
  return jax.lax.map(one_seed, params)


def greedy_continuation(graphdef, params, prompts, steps: int) -> np.ndarray:
  """``[seeds, b, steps]`` token ids each seed's model writes after each
  prompt of ``prompts [b, n]``, greedily (argmax), one token at a time."""
  return np.asarray(_greedy(graphdef, params, jnp.asarray(prompts, jnp.int32), steps))


def score_passkey(continuations, answers) -> np.ndarray:
  """``[seeds, b]`` 1.0 where the continuation's bytes spell the answer
  exactly (``continuations [seeds, b, k]`` token ids, ``answers`` b strings of
  k characters), else 0.0."""
  return np.array([[corpus_lib.decode(row) == a for row, a in zip(seed, answers)]
                   for seed in np.asarray(continuations)], float)


def passkey_accuracy(graphdef, params, lengths, depths, *, trials: int = 4,
                     seed: int = 0, notify=lambda msg: None) -> dict:
  """Accuracy of each seed's model at every (length, depth): ``{"lengths",
  "depths", "accuracy": [seeds, lengths, depths]}``, over ``trials`` random
  five-digit keys per cell (the same keys for every seed and cell)."""
  rng = np.random.default_rng(seed)
  keys = [f"{k:05d}" for k in rng.integers(10_000, 100_000, trials)]
  seeds = jax.tree.leaves(params)[0].shape[0]
  acc, kept, errors = [], [], {}
  for n in lengths:
    prompts, answers = [], []
    for d in depths:
      for k in keys:
        ids, ans = passkey_prompt(int(n), float(d), k)
        prompts.append(ids)
        answers.append(ans)
    try:
      out = greedy_continuation(graphdef, params, np.stack(prompts), 5)  # [seeds, cells, 5]
    except ValueError as e:  # a length the PE cannot reach (a learned table)
      errors[str(n)] = str(e).splitlines()[0]
      notify(f"passkey at {n} tokens: not evaluated: {errors[str(n)]}")
      continue
    right = score_passkey(out, answers)
    acc.append(right.reshape(seeds, len(depths), trials).mean(-1))
    kept.append(int(n))
    notify(f"passkey at {n} tokens: {100 * acc[-1].mean():.1f}% over depths and seeds")
  acc = np.stack(acc, 1) if acc else np.zeros((seeds, 0, len(depths)))
  return {"lengths": kept, "depths": [float(d) for d in depths], "keys": keys,
          "accuracy": acc.tolist(), "not_evaluated": errors}

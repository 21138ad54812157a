"""Accuracy ceilings of the distance task (Task 1), for honest reference lines.

* **Bayes ceiling**: triggers may recur as fillers, so a few sentences admit
  several parses. :func:`distance_bayes_accuracy` computes, per example, the
  exact posterior over the admissible parses under the generator (uniform
  segment lengths, each segment a uniform draw without replacement, the
  right segment possibly cut) and returns the expected accuracy of the MAP
  label: ≈ 97.5% on the paper preset's data.
* **Permutation-invariant ceiling**: a model that sees only the bag of tokens
  can use at most (length, #A, #B); :func:`bag_of_tokens_accuracy` is the
  in-sample majority accuracy given those statistics (≈ 6.9% at paper sizes).
"""
from __future__ import annotations

import collections
import math

import numpy as np

from pe_spectral.data.tasks import TaskConfig

__all__ = ["distance_posterior", "distance_bayes_accuracy", "bag_of_tokens_accuracy"]


def _log_falling(v: int, k: int) -> float:
  """log(v (v-1) ... (v-k+1)): probability denominator of an ordered draw."""
  return math.lgamma(v + 1) - math.lgamma(v - k + 1)


def distance_posterior(tokens, a: int, b: int, cfg: TaskConfig) -> dict[int, float]:
  """Posterior over labels for one sentence (list of ids without padding)."""
  n = len(tokens)
  fillers = cfg.vocab_size - 1
  cut = n == cfg.seq_len
  side = cfg.side_max - cfg.side_min + 1
  logp = collections.defaultdict(list)
  a_pos = [i for i in range(cfg.side_min, min(cfg.side_max, n - 1) + 1) if tokens[i] == a]
  b_pos = set(j for j, t in enumerate(tokens) if t == b)
  for i in a_pos:
    for m in range(cfg.mid_min, cfg.mid_max + 1):
      j = i + m + 1
      if j not in b_pos:
        continue
      r_obs = n - j - 1
      if cut:
        lo = max(cfg.side_min, r_obs)
        if lo > cfg.side_max:
          continue
        p_right = (cfg.side_max - lo + 1) / side
      else:
        if not cfg.side_min <= r_obs <= cfg.side_max:
          continue
        p_right = 1.0 / side
      segs = (tokens[:i], tokens[i + 1:j], tokens[j + 1:])
      if any(len(set(s)) != len(s) for s in segs):
        continue
      lp = math.log(p_right) - sum(_log_falling(fillers, len(s)) for s in segs)
      logp[m + 1].append(lp)  # P(l), P(m) are uniform: common factors
  if not logp:
    return {}
  per_label = {y: np.logaddexp.reduce(v) for y, v in logp.items()}
  top = max(per_label.values())
  z = sum(math.exp(v - top) for v in per_label.values())
  return {y: math.exp(v - top) / z for y, v in per_label.items()}


def distance_bayes_accuracy(cfg: TaskConfig, ids, labels, triggers) -> dict:
  """Expected accuracy of the MAP label (and its empirical accuracy) on a sample."""
  a, b = (int(t) for t in triggers)
  ids = np.asarray(ids)
  expected, hits, ambiguous = [], [], 0
  for row, y in zip(ids, np.asarray(labels)):
    tokens = [int(t) for t in row[row != 0]]
    post = distance_posterior(tokens, a, b, cfg)
    best = max(post, key=post.get)
    expected.append(post[best])
    hits.append(best == int(y))
    ambiguous += len(post) > 1
  return {"expected": float(np.mean(expected)), "empirical": float(np.mean(hits)),
          "ambiguous_fraction": ambiguous / len(ids), "num_examples": len(ids)}


def bag_of_tokens_accuracy(ids, labels, triggers) -> float:
  """In-sample majority accuracy from (length, #A, #B): the permutation-invariant ceiling."""
  ids = np.asarray(ids)
  labels = np.asarray(labels)
  a, b = (int(t) for t in triggers)
  keys = np.stack([(ids != 0).sum(1), (ids == a).sum(1), (ids == b).sum(1)], 1)
  groups = collections.defaultdict(collections.Counter)
  for k, y in zip(map(tuple, keys), labels):
    groups[k][int(y)] += 1
  return sum(c.most_common(1)[0][1] for c in groups.values()) / len(labels)

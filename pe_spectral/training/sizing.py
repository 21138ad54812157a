"""Seed groups sized by compiling: the widest vmap whose training chunk and
evaluation fit the device (:func:`auto_seed_group`).

Each candidate group is compiled from shapes only (never run) and measured with
XLA's ``memory_analysis`` (``runtime/memory.py``); the pure steps themselves
live in ``training/train.py``.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from pe_spectral.runtime.memory import choose_seed_group, memory_budget, needed_bytes
from pe_spectral.training.train import Steps, jit_chunk, jit_evaluate, make_steps

__all__ = ["data_shapes", "compile_chunk", "compile_eval", "chunk_bytes", "eval_bytes",
           "group_bytes", "auto_seed_group"]


def data_shapes(steps: Steps, num_examples: int):
  """Shapes of ``num_examples`` token sequences and their labels."""
  return (jax.ShapeDtypeStruct((num_examples, steps.task_cfg.max_len), jnp.int32),
          jax.ShapeDtypeStruct((num_examples,), jnp.int32))


def compile_chunk(steps: Steps, num_seeds: int, *, num_steps: int = 2):
  """The training chunk for ``num_seeds`` seeds and ``num_steps`` steps,
  compiled from shapes only (never run; e.g. for its ``memory_analysis()``)."""
  keys = jax.ShapeDtypeStruct((num_seeds,), jnp.uint32)
  return jit_chunk(steps).lower(steps.abstract_state(num_seeds), keys,
                                *data_shapes(steps, steps.num_train),
                                num_steps=num_steps).compile()


def compile_eval(steps: Steps, num_seeds: int, num_examples: int):
  """The evaluation of ``num_examples`` examples, compiled from shapes only."""
  params = steps.abstract_state(num_seeds)["params"]
  return jit_evaluate(steps).lower(params, *data_shapes(steps, num_examples)).compile()


def chunk_bytes(steps: Steps, num_seeds: int, *, num_steps: int = 2) -> int:
  """Bytes the compiled training chunk needs for ``num_seeds`` seeds
  (:func:`compile_chunk`). Its length hardly matters: the steps run in a
  ``lax.scan``."""
  return needed_bytes(compile_chunk(steps, num_seeds, num_steps=num_steps))


def eval_bytes(steps: Steps, num_seeds: int, num_examples: int) -> int:
  """Bytes of the compiled evaluation of ``num_examples`` examples."""
  return needed_bytes(compile_eval(steps, num_seeds, num_examples))


@functools.lru_cache(maxsize=64)
def group_bytes(model_cfg, task_cfg, train_cfg, *, num_train: int, num_seeds: int,
                seed_group: Optional[int]) -> int:
  """The larger of :func:`chunk_bytes` and :func:`eval_bytes` (one
  evaluation batch) with this ``seed_group`` (None: one vmap), cached on the
  frozen configs (each candidate compiles once per process)."""
  steps = make_steps(model_cfg, task_cfg, train_cfg, num_train, seed_group=seed_group)
  return max(chunk_bytes(steps, num_seeds),
             eval_bytes(steps, num_seeds, train_cfg.eval_batch_size))


def auto_seed_group(model_cfg, task_cfg, train_cfg, *, num_train: int, num_seeds: int,
                    limit_bytes: Optional[int] = None, memory_gib: Optional[float] = None,
                    fraction: float = 1.0,
                    notify: Callable[[str], None] = lambda msg: None) -> Optional[int]:
  """``seed_group`` for :func:`make_steps`: the widest group of seeds whose
  training chunk's and evaluation's compiled temporaries and arguments
  (:func:`group_bytes`) fit ``limit_bytes``, by default :func:`memory_budget`'s
  (``memory_gib``, else 90 % of ``fraction`` of the device's free memory).
  None (one vmap over all seeds) when all fit; the choice is reported to
  ``notify``."""
  source = "given"
  if limit_bytes is None:
    limit_bytes, source = memory_budget(memory_gib=memory_gib, fraction=fraction)
  if limit_bytes is None:
    notify(f"seed group auto: {source}; all seeds in one vmap")
    return None
  usable = int(limit_bytes)
  needs = lambda g: group_bytes(model_cfg, task_cfg, train_cfg, num_train=num_train,
                                num_seeds=num_seeds,
                                seed_group=None if g == num_seeds else g)
  g, measured = choose_seed_group(num_seeds, needs, usable)
  gib = lambda b: f"{b / 1024 ** 3:.2f} GiB" if b >= 1024 ** 3 else f"{b / 1024 ** 2:.0f} MiB"
  tried = ", ".join(f"{k} at a time {gib(v)}" for k, v in measured.items())
  where = f"usable {gib(usable)}, {source}"
  if measured[g] > usable:
    notify(f"seed group auto: even one seed at a time needs {gib(measured[g])}, more than "
           f"the {where}; trying anyway "
           f"(the memory options remat and attention_block shrink it)")
  else:
    notify(f"seed group auto: {num_seeds} seeds, {g} at a time ({tried}; {where})")
  return None if g == num_seeds else g

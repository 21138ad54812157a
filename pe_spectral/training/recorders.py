"""What a run writes at every evaluation: :class:`Recorder` and the built-in ones.

:func:`pe_spectral.training.runner.run` hands each evaluation (an
:class:`Evaluation`) to its recorders in turn and never looks inside: the
metrics row and every step's loss always, the logit spectra and the loss
curvature when asked for, a PE's trained frequencies when it has them, then
the caller's own (e.g. :class:`pe_spectral.training.events.TensorBoardRecorder`).
Each recorder owns its file and cuts it back to the checkpoint's step on resume.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, NamedTuple

import jax
import numpy as np

from pe_spectral.analysis import curvature, decompose
from pe_spectral.pe import spectral
from pe_spectral.runtime import devices, speed
from pe_spectral.training.train import Steps
from pe_spectral.training.workdir import json_safe, truncate_jsonl

__all__ = ["Evaluation", "Recorder", "JsonlRecorder", "MetricsRecorder", "StepLossRecorder",
           "SpectraRecorder", "FrequencyRecorder", "CurvatureRecorder", "builtin_recorders",
           "curvature_fn", "CURVATURE_ITERS", "CURVATURE_TRACE_SAMPLES"]


def _spectra_record(steps, states, probe_ids, step: int) -> dict:
  """Per-layer/head spectral measures (median over the probe examples) per seed."""
  summ = decompose.summarize(steps.graphdef, states["params"], probe_ids,
                             steps.model_cfg.num_layers)
  med = lambda f: np.stack([np.median(devices.fetch(f(s)), axis=1) for s in summ],
                           1).tolist()  # [seeds, layers, heads]
  return {"step": step,
          "contraction_ratio": med(lambda s: s["contraction_ratio"]),
          "widening_ratio": med(lambda s: s["widening_ratio"]),
          "spread": med(lambda s: s["measures"]["spread"]),
          "stable_rank": med(lambda s: s["measures"]["stable_rank"])}


# Recorded at every evaluation: Lanczos steps per estimate, Hutchinson probes
# (0: no trace -- with a few probes its standard error exceeds the estimate on
# these models, and each probe costs a Hessian-vector product per seed).
CURVATURE_ITERS, CURVATURE_TRACE_SAMPLES = 10, 0


@functools.lru_cache(maxsize=64)
def curvature_fn(steps: Steps, *, k: int = 1, num_iters: int = CURVATURE_ITERS,
                 trace_samples: int = CURVATURE_TRACE_SAMPLES):
  """The jitted ``(params, opt_state, ids, labels, key) -> per-seed curvature``
  of ``steps.loss`` in eval mode (no dropout), vmapped over seeds; traced
  on the reference path (forward mode needs it; ``speed.reference``), and
  cached on the frozen configs (``steps``) and the options."""
  tc = steps.train_cfg

  def one(params, opt_state, ids, labels, key):
    loss = lambda p: steps.loss(p, ids, labels)[0]
    return curvature.curvature_summary(loss, params, opt_state, b1=tc.b1, b2=tc.b2,
                                       eps=tc.eps, key=key, k=k, num_iters=num_iters,
                                       trace_samples=trace_samples)

  vm = jax.jit(jax.vmap(one, in_axes=(0, 0, None, None, None)))

  def call(*args):
    with speed.reference():  # the switch is read while tracing
      return vm(*args)
  return call


def _curvature_record(steps, states, ids, labels, step: int) -> dict:
  """Curvature of the training loss on fixed training examples, per seed."""
  fn = curvature_fn(steps)
  # the same probe directions at every evaluation and for every seed
  out = fn(states["params"], states["opt_state"], ids, labels, jax.random.key(0xC0DE))
  rec = {"step": step}
  for name, val in out.items():
    rec[name] = json_safe(devices.fetch(val).tolist())
  return rec


class Evaluation(NamedTuple):
  """One evaluation, as every :class:`Recorder` receives it."""
  session: Any        # the run's fixed pieces (config, seeds, paths, steps, placed data)
  step: int           # the step just reached
  first_step: int     # the chunk's first step
  states: Any         # the seed-stacked train state at ``step``
  losses: np.ndarray  # [seeds, steps of the chunk]: each step's loss before its update
  metrics: dict       # the metrics.jsonl row (accuracies, losses, examples seen)
  rows: dict          # {file name: row} the JSONL recorders before this one wrote


class Recorder:
  """Something written at every evaluation: subclasses implement :meth:`record`
  and own their output; :func:`run` calls them in order and never looks inside.

  ``open`` runs once per session before the loop, ``truncate`` on resume (drop
  what lies past the checkpoint's step), ``close`` after the loop."""

  def open(self, session) -> None:
    pass

  def truncate(self, session, step: int) -> None:
    pass

  def record(self, ev: Evaluation) -> None:
    raise NotImplementedError

  def close(self) -> None:
    pass


class JsonlRecorder(Recorder):
  """A row per evaluation in ``<workdir>/<name>.jsonl`` (process 0 writes it);
  subclasses implement :meth:`row`. ``allow_nan``: False writes strict JSON
  (a non-finite value is refused: the row must be ``json_safe``)."""
  name = ""
  allow_nan = True

  def path(self, session) -> str:
    return os.path.join(session.workdir, f"{self.name}.jsonl")

  def truncate(self, session, step: int) -> None:
    truncate_jsonl(self.path(session), step, cut_off=session.notify)

  def row(self, ev: Evaluation) -> dict:
    raise NotImplementedError

  def record(self, ev: Evaluation) -> None:
    row = self.row(ev)
    ev.rows[self.name] = row
    if ev.session.writer:
      path = self.path(ev.session)
      try:
        with open(path, "a") as f:
          f.write(json.dumps(row, allow_nan=self.allow_nan) + "\n")
      except OSError as e:  # a full disk: the error names the file it could not write
        e.filename = e.filename or path
        raise


class MetricsRecorder(JsonlRecorder):
  """``metrics.jsonl``: the evaluation's row, strict JSON."""
  name, allow_nan = "metrics", False

  def row(self, ev):
    return ev.metrics


class StepLossRecorder(JsonlRecorder):
  """``steps.jsonl``: every step's loss (measured before its update), for
  loss-spike counts."""
  name = "steps"

  def row(self, ev):
    return {"step": ev.step, "first_step": ev.first_step,
            "loss": np.round(ev.losses.astype(np.float64), 5).tolist()}


class SpectraRecorder(JsonlRecorder):
  """``spectra.jsonl``: per-layer/head logit spectra on ``num`` fixed test examples."""
  name = "spectra"

  def __init__(self, num: int):
    self.num = num

  def open(self, session):
    self.probe_ids = session.arrays["test_ids"][:self.num]
    if session.rc.task.is_lm:  # a language model's windows: the tokens it reads
      self.probe_ids = self.probe_ids[:, :-1]

  def row(self, ev):
    return _spectra_record(ev.session.steps, ev.states, self.probe_ids, ev.step)


class FrequencyRecorder(JsonlRecorder):
  """``frequencies.jsonl``: a PE's trained frequencies (``frequency_param``,
  e.g. rope_learned's θ) at every evaluation, ``theta [seeds, layers, heads,
  F]``, with ``drift_median [seeds, layers, heads]``, the median over
  frequencies of ``|log(θ/θ₀)|`` from the PE's initial frequencies."""
  name = "frequencies"

  def open(self, session):
    cfg = session.rc.model
    self.param, self.theta0 = cfg.encoding.frequency_param, cfg.encoding.frequencies(cfg)

  def row(self, ev):
    blocks = ev.states["params"]["blocks"]
    theta = np.stack([np.asarray(devices.fetch(blocks[i][self.param]), np.float64)
                      for i in sorted(blocks, key=int)], axis=1)  # [seeds, layers, heads, F]
    drift = np.median(spectral.frequency_drift(theta, self.theta0), axis=-1)
    return {"step": ev.step, "theta": theta.tolist(), "drift_median": drift.tolist()}


class CurvatureRecorder(JsonlRecorder):
  """``curvature.jsonl``: the loss curvature on ``num`` fixed training examples."""
  name, allow_nan = "curvature", False

  def __init__(self, num: int):
    self.num = num

  def open(self, session):
    arr = session.arrays
    if session.rc.task.is_lm:  # fixed training windows: inputs and their next tokens
      w = arr["sub_ids"][:self.num]
      self.ids, self.labels = w[:, :-1], w[:, 1:]
    else:
      self.ids, self.labels = arr["train_ids"][:self.num], arr["train_labels"][:self.num]

  def row(self, ev):
    return _curvature_record(ev.session.steps, ev.states, self.ids, self.labels, ev.step)


def builtin_recorders(rc, *, record_spectra: int = 0, record_curvature: int = 0) -> list:
  """The recorders every run of ``rc`` has: metrics and step losses; spectra and
  curvature on that many examples when asked for; trained frequencies when the
  PE has them (always recorded)."""
  out = [MetricsRecorder(), StepLossRecorder()]
  if record_spectra:
    out.append(SpectraRecorder(record_spectra))
  if record_curvature:
    out.append(CurvatureRecorder(record_curvature))
  if rc.model.encoding.frequency_param:
    out.append(FrequencyRecorder())
  return out

"""TensorBoard event files of a run: a :class:`~pe_spectral.training.recorders.Recorder`
beside the JSONL ones, and a converter for workdirs that have none.

Each run gets ``<workdir>/tb/seed<s>/`` per seed and ``<workdir>/tb/mean/``, so
``tensorboard --logdir runs/`` draws every seed of every run as its own line
under the same tags (``loss/train``, ``accuracy/test``, ...; with recorded
spectra ``spectra/<measure>/layer<l>``, the median over heads; with recorded
curvature ``curvature/<measure>``).

Optional: the writer is ``tensorboardX`` (pure Python, about 90 KB over
protobuf and numpy). The ``tensorboard`` package (5.5 MB with grpcio and a web
server) is needed only to view the files, or to read them back
(:func:`read_scalars`), so a training machine needs the light one alone.

A resumed run writes each step once: the recorder learns the checkpoint's step
on resume and marks the event files to purge every later step (TensorBoard's
``purge_step``), so steps evaluated after the checkpoint and before a kill are
replaced, never doubled.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Optional, Sequence

import numpy as np

from pe_spectral.training.recorders import Evaluation, Recorder
from pe_spectral.training.workdir import read_config, read_jsonl

__all__ = ["SUBDIR", "INSTALL_HINT", "available", "scalars", "TensorBoardRecorder",
           "convert", "read_scalars"]

SUBDIR = "tb"
INSTALL_HINT = "pip install tensorboardX (then tensorboard --logdir runs/ to view)"

_METRICS = (("train_loss", "loss/train"), ("test_loss", "loss/test"),
            ("train_accuracy", "accuracy/train"), ("test_accuracy", "accuracy/test"))
_SPECTRA = ("contraction_ratio", "widening_ratio", "spread", "stable_rank")


def available() -> bool:
  """Whether the writer (``tensorboardX``) can be imported."""
  try:
    return importlib.util.find_spec("tensorboardX") is not None
  except (ImportError, ValueError):  # blocked (sys.modules entry None) or broken
    return False


def _finite(v) -> Optional[float]:
  if v is None:
    return None
  v = float(v)
  return v if np.isfinite(v) else None


def scalars(seeds: Sequence[int], metrics: dict, spectra: Optional[dict] = None,
            curvature: Optional[dict] = None) -> dict:
  """``{writer name: {tag: value}}`` of one evaluation's rows (``metrics.jsonl``,
  and ``spectra.jsonl`` / ``curvature.jsonl`` rows when recorded): one writer
  per seed (``seed<s>``) and their mean (``mean``); missing or non-finite
  values are left out."""
  out = {f"seed{s}": {} for s in seeds}
  out["mean"] = {}

  def put(tag, per_seed):
    vals = [_finite(v) for v in per_seed]
    for s, v in zip(seeds, vals):
      if v is not None:
        out[f"seed{s}"][tag] = v
    finite = [v for v in vals if v is not None]
    if finite:
      out["mean"][tag] = float(np.mean(finite))

  for key, tag in _METRICS:
    if metrics.get(key) is not None:
      put(tag, metrics[key])
  for key in _SPECTRA if spectra else ():
    if spectra.get(key) is None:
      continue
    a = np.asarray(spectra[key], float)  # [seeds, layers, heads], medians over probes
    for layer in range(a.shape[1]):
      put(f"spectra/{key}/layer{layer}", np.median(a[:, layer], axis=-1))
  for key, val in (curvature or {}).items():
    if key == "step" or val is None:
      continue
    a = np.array(val, dtype=float)  # a None (a value not computed) becomes nan
    if a.ndim == 1 and len(a) == len(seeds):
      put(f"curvature/{key}", a)
    elif a.ndim == 2 and len(a) == len(seeds):  # e.g. the top-k eigenvalues: the largest
      put(f"curvature/{key}", a[:, 0])
  return out


class _Writers:
  """One ``tensorboardX.SummaryWriter`` per seed and one for the mean."""

  def __init__(self, logdir: str, seeds: Sequence[int], purge_step: Optional[int]):
    from tensorboardX import SummaryWriter
    self.writers = {n: SummaryWriter(os.path.join(logdir, n), purge_step=purge_step)
                    for n in [f"seed{s}" for s in seeds] + ["mean"]}
    for w in self.writers.values():  # the files' headers now, while there is room: a
      w.flush()  # writer left with pending data retries it at exit, with a traceback

  def log(self, step: int, values: dict) -> None:
    for name, tags in values.items():
      w = self.writers.get(name)
      for tag, v in tags.items():
        w.add_scalar(tag, v, global_step=step)
      w.flush()  # a running sweep shows up in TensorBoard at each evaluation

  def close(self) -> None:
    for w in self.writers.values():
      w.close()


class TensorBoardRecorder(Recorder):
  """Writes each evaluation's scalars (and the spectra and curvature rows the
  JSONL recorders before it wrote) as TensorBoard events; it never changes
  training. Process 0 writes."""

  def __init__(self):
    self._purge: Optional[int] = None
    self._writers: Optional[_Writers] = None

  def truncate(self, session, step: int) -> None:
    self._purge = step + 1  # every later step is redone: TensorBoard drops the old ones

  def open(self, session) -> None:
    if session.writer:
      self._writers = _Writers(os.path.join(session.workdir, SUBDIR), session.seeds,
                               self._purge)

  def record(self, ev: Evaluation) -> None:
    if self._writers is not None:
      self._writers.log(ev.step, scalars(ev.session.seeds, ev.metrics,
                                         ev.rows.get("spectra"), ev.rows.get("curvature")))

  def close(self) -> None:
    if self._writers is not None:
      self._writers.close()
      self._writers = None


def convert(workdir: str) -> int:
  """Writes ``<workdir>/tb/`` afresh from the run's JSONL files (a finished or
  committed run, or one trained without the writer); returns the number of
  evaluations written."""
  seeds = read_config(os.path.join(workdir, "config.json"))["seeds"]
  by_step = lambda name: {r["step"]: r for r in read_jsonl(os.path.join(workdir, name))}
  metrics, spectra, curvature = (by_step(n) for n in ("metrics.jsonl", "spectra.jsonl",
                                                     "curvature.jsonl"))
  out = os.path.join(workdir, SUBDIR)
  shutil.rmtree(out, ignore_errors=True)
  writers = _Writers(out, seeds, None)
  try:
    for step in sorted(metrics):
      writers.log(step, scalars(seeds, metrics[step], spectra.get(step), curvature.get(step)))
  finally:
    writers.close()
  return len(metrics)


def read_scalars(logdir: str) -> dict:
  """``{tag: [(step, value), ...]}`` of one writer's directory in the order
  TensorBoard's own loader gives them (orphaned steps purged, as TensorBoard
  shows them; a step written twice appears twice). Needs ``tensorboard``."""
  from tensorboard.backend.event_processing import event_accumulator
  acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0},
                                           purge_orphaned_data=True)
  acc.Reload()
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}

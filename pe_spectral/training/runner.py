"""A whole multi-seed run: data, chunked training, evaluation, checkpoints, files.

Workdir layout (everything a table or plot shows is read from these files):

* ``config.json``   -- the configuration (model, task, train, seeds, eval_every;
  only the model and task fields that apply to the run's PE and task);
* ``metrics.jsonl`` -- one JSON object per evaluation: step, examples seen
  (per seed), per-seed values; ``steps.jsonl`` every step's loss, and
  ``spectra.jsonl`` / ``curvature.jsonl`` when asked for: each file is a
  :class:`Recorder`, and the loop calls the recorders in turn (a caller's own,
  e.g. a TensorBoard writer, after them);
* ``ckpt/``         -- orbax checkpoints (keep-last-N) of the seed-stacked state,
  each with a checksum; a resume restores the newest one that verifies
  (``Checkpointer.restore_verified``), falling back to the older one;
* ``summary.json``  -- final per-seed accuracies and their mean/std, the
  examples seen, whether each seed plateaued (``stats.plateau``), the
  device it ran on and (``environment``) the library versions and host CPU of
  the session that finished it;
* ``accuracy.png``  -- train/test accuracy curves (mean ± std over seeds);
* ``.lock``         -- held (``flock``) while a run trains here: a second run on
  the same workdir is refused; the kernel drops the lock when the holder dies,
  so a killed run leaves no stale lock.

Rerunning the same command resumes from the last checkpoint and reproduces the
uninterrupted run exactly (batch order and dropout are functions of
(seed, step)) on the same machine and libraries; a finished run is not
retrained. Only process 0 writes files.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from pe_spectral.analysis import plotting, stats
from pe_spectral.data import tasks
from pe_spectral.nn.model import check_token_ids
from pe_spectral.pe import encodings
from pe_spectral.runtime import devices
from pe_spectral.runtime.errors import Remedy, RunError
from pe_spectral.training import train as train_lib
from pe_spectral.training.checkpoint import Checkpointer, CheckpointError, DiskFullError
from pe_spectral.training.config import RunConfig
from pe_spectral.training.recorders import (
  Evaluation,
  JsonlRecorder,
  Recorder,
  builtin_recorders,
)
from pe_spectral.training.sizing import auto_seed_group
from pe_spectral.training.train import Steps, make_steps, seed_mesh
from pe_spectral.training.workdir import (
  BadFileError,
  ConfigMismatchError,
  WorkdirBusyError,
  check_workdir,
  config_diff,
  json_safe,
  lock_holder,
  read_config,
  read_jsonl,
  remove_unfinished_saves,
  workdir_lock,
  write_json,
)

__all__ = ["run", "RunOptions", "Hooks", "Recorder", "JsonlRecorder", "Evaluation",
           "summarise", "draw_figures", "load_run", "LoadedRun", "NonFiniteLossError",
           "ConfigMismatchError", "BadFileError",
           "CheckpointError", "DiskFullError", "WorkdirBusyError", "Interrupted", "read_jsonl",
           "read_config",
           "write_json", "config_diff", "workdir_lock", "json_safe", "host_environment"]


class NonFiniteLossError(RunError):
  """Raised when a chunk produced a NaN/Inf loss; the last good checkpoint stays."""


class Interrupted(Exception):
  """``should_stop`` asked the run to stop; ``step`` is the checkpoint it left."""

  def __init__(self, step: Optional[int]):
    super().__init__(step)
    self.step = step


def _notify_stderr(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How :func:`run` trains, beyond the config, the seeds and the workdir.

  Attributes:
    eval_every: steps between evaluations/checkpoints (default: one epoch).
    resume: continue from the workdir's last checkpoint if present; False
      discards an earlier run there.
    max_to_keep: checkpoints kept.
    record_spectra: if > 0, at each evaluation record per-layer/head logit
      spectra (``decompose.py``) on this many fixed test examples into
      ``spectra.jsonl`` (:class:`SpectraRecorder`).
    record_curvature: if > 0, at each evaluation record the loss curvature
      (top Hessian eigenvalue, Adam-preconditioned sharpness, gradient norm;
      ``curvature.py``) on this many fixed training examples, every seed in
      one compiled call, into ``curvature.jsonl`` (:class:`CurvatureRecorder`).
    seed_group: vmap this many seeds at a time, groups one after another in
      the same compiled chunk (single device only; default: all seeds at
      once). ``"auto"``: the widest group whose chunk fits the device's
      memory (:func:`sizing.auto_seed_group`; the choice goes to ``notify``),
      within ``memory_gib`` if given, else 90 % of ``memory_fraction`` of the
      device's free memory; with several devices the seeds are sharded instead.
    call_seconds: split each evaluation interval into compiled calls of about
      this many seconds, so that ``should_stop`` is polled between them and a
      stop there saves a checkpoint mid-interval (with the interval's losses
      so far, which the resume carries on): a preemption then loses at most
      one call. Sized from the pace of the session's first call (which is the
      whole first interval), rounded down to a power of two and then fixed
      for the run (the checkpoints carry it); one process only. None: one call
      per interval. The calls run the same steps on the same data as one call:
      the result is bit-identical (tests/test_sweep.py).
  """
  eval_every: Optional[int] = None
  resume: bool = True
  max_to_keep: int = 2
  record_spectra: int = 0
  record_curvature: int = 0
  seed_group: Union[None, int, str] = None
  memory_gib: Optional[float] = None
  memory_fraction: float = 1.0
  call_seconds: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Hooks:
  """What :func:`run` calls while it trains.

  Attributes:
    progress: after each evaluation, with a dict of progress fields.
    should_stop: polled after each evaluation's checkpoint is saved (and
      between the calls of an interval, ``RunOptions.call_seconds``); when it
      returns True the run stops there, saved, and raises :class:`Interrupted`.
    on_checkpoint: with the step right after each checkpoint save has
      started (asynchronously); the recovery tests kill the process there.
    notify: one-line notices (e.g. a checkpoint skipped on resume).
  """
  progress: Optional[Callable[[dict], None]] = None
  should_stop: Optional[Callable[[], bool]] = None
  on_checkpoint: Optional[Callable[[int], None]] = None
  notify: Callable[[str], None] = _notify_stderr


def run(rc, seeds: list[int], workdir: str, options: RunOptions = RunOptions(),
        hooks: Hooks = Hooks(), recorders: Sequence[Recorder] = ()) -> dict:
  """Trains ``len(seeds)`` models of ``rc`` (a :class:`pe_spectral.training.config.RunConfig`),
  all seeds in one compiled program, into ``workdir`` (created).

  A run's whole life, top to bottom: the workdir's checks, the data and the
  compiled steps, resume or init, then chunks of ``eval_every`` steps, each
  followed by an evaluation, the recorders, a checkpoint and the stop/progress
  hooks; the summary at the end. Each evaluation goes to every recorder: the
  metrics and step losses always, the spectra and curvature when ``options``
  ask for them (:func:`recorders.builtin_recorders`), then ``recorders`` (e.g.
  a TensorBoard writer: :class:`Recorder`).

  Returns:
    The summary dict (also written to ``summary.json``).

  Raises:
    ConfigMismatchError, WorkdirBusyError, CheckpointError (no kept checkpoint
    verifies), DiskFullError, NonFiniteLossError (each a
    :class:`~pe_spectral.runtime.errors.RunError`
    with a one-line message and what to do), Interrupted.
  """
  writer, t_start, notify = jax.process_index() == 0, time.time(), hooks.notify
  # Everything the workdir checks need comes from the configs alone, so a run
  # that cannot go ahead is refused before any data is generated or compiled.
  options, config, paths = _plan(rc, seeds, workdir, options)
  if writer:
    os.makedirs(workdir, exist_ok=True)
  with workdir_lock(workdir, notify) if writer else contextlib.nullcontext():
    check_workdir(workdir, paths, config, options.resume)
    if options.resume and os.path.exists(paths["summary"]):
      with open(paths["summary"]) as f:
        summary = json.load(f)
      notify(f"{workdir} already finished (same settings): its results are in "
             f"{paths['summary']} and {paths['metrics']}; nothing was changed "
             "(resume=False trains it again)")
      return summary
    notify(f"{workdir}: generating data and compiling; the first progress line comes "
           "after the first evaluation")
    session = _session(rc, seeds, workdir, paths, options, notify)
    steps, total = session.steps, session.steps.total_steps
    recorders = builtin_recorders(rc, record_spectra=options.record_spectra,
                                  record_curvature=options.record_curvature) + list(recorders)
    unfinished = remove_unfinished_saves(paths["ckpt"]) if writer and options.resume else []
    ckpt = Checkpointer(paths["ckpt"], max_to_keep=options.max_to_keep, fetch=devices.fetch)
    try:
      states, step, elapsed, records, pending, call = _resume_or_init(
          session, ckpt, resume=options.resume, unfinished=unfinished, notify=notify,
          recorders=recorders)
      for r in recorders:
        r.open(session)
      try:
        chunk = train_lib.jit_chunk(steps)
        pace = _Pace(options.call_seconds if jax.process_count() == 1 else None, call)
        while step < total:
          t0 = time.time()
          target = min((step // options.eval_every + 1) * options.eval_every, total)
          states, losses, ran, compile_s = _train_to(
              session, chunk, states, step, target, pending, pace, ckpt, hooks,
              elapsed=lambda: elapsed + time.time() - t0)
          step, pending, k = target, None, losses.shape[1]
          t1 = time.time()
          test_acc, test_loss, train_acc = _evaluate(session, states)
          compile_s += time.time() - t1
          dt = time.time() - t0
          elapsed += dt
          rec = _metrics_row(session, step, losses, test_acc, test_loss, train_acc, elapsed)
          records.append(rec)
          t_rec = time.time()
          ev = Evaluation(session, step, step - k, states, losses, rec, {})
          for r in recorders:
            r.record(ev)
          rec_s = time.time() - t_rec  # the recorders (a first spectra/curvature call compiles)
          ckpt.save(step, states, {"step": step, "elapsed": elapsed, "call_steps": pace.call})
          if hooks.on_checkpoint is not None:
            hooks.on_checkpoint(step)
          if hooks.should_stop is not None and hooks.should_stop() and step < total:
            ckpt.wait()
            raise Interrupted(step)
          if hooks.progress:
            hooks.progress(pace.row(losses, test_acc, test_loss, train_acc, step=step,
                                    total=total, k=ran, dt=dt, compile_s=compile_s,
                                    rec_s=rec_s))
      finally:
        _close(recorders)
    finally:
      ckpt.close()  # awaits the asynchronous save
    summary = summarise(session, records, t_start=t_start)
    if writer:
      write_json(paths["summary"], summary)
      draw_figures(session, records, spectra=bool(options.record_spectra))
  return summary


def _train_to(session, chunk, states, step, target, pending, pace, ckpt, hooks, *, elapsed):
  """Trains from ``step`` to the evaluation at ``target``: one compiled call,
  or several of ``pace.call_steps`` (``RunOptions.call_seconds``) with
  ``should_stop`` polled between them -- a stop there saves the step reached,
  with the interval's losses so far (``pending`` carries them on at the
  resume), and raises :class:`Interrupted`. Returns ``(states, losses [seeds,
  the interval's steps], steps run here, seconds spent compiling)``."""
  arr = session.arrays
  parts, compile_s, ran = [] if pending is None else [pending], 0.0, 0
  while step < target:
    n = pace.call_steps(target - step)
    t_call = time.time()
    states, losses = chunk(states, session.keys, arr["train_ids"], arr["train_labels"],
                           num_steps=n)
    # A jitted call traces and compiles before it returns; the execution
    # itself is asynchronous (``fetch`` waits for it, polling, so that Ctrl-C
    # is handled at once). The call's own time is compilation.
    t_run = time.time()
    compile_s += t_run - t_call
    losses = devices.fetch(losses)  # [seeds, n]
    pace.ran(n, time.time() - t_run)
    _check_finite(session, ckpt, states, losses, step, n)
    step, ran = step + n, ran + n
    parts.append(losses)
    if step < target and hooks.should_stop is not None and hooks.should_stop():
      so_far = np.concatenate(parts, axis=1)
      ckpt.save(step, states, {"step": step, "elapsed": elapsed(),
                               "interval_losses": so_far.tolist(), "call_steps": pace.call})
      if hooks.on_checkpoint is not None:
        hooks.on_checkpoint(step)
      ckpt.wait()
      raise Interrupted(step)
  return states, np.concatenate(parts, axis=1), ran, compile_s


def _close(recorders) -> None:
  """Closes every recorder. A close that fails while another error is on its
  way out (a full disk: a writer cannot flush either) does not replace that
  error, which says what went wrong; otherwise the first failure is raised."""
  unwinding, first = sys.exc_info()[1] is not None, None
  for r in recorders:
    try:
      r.close()
    except Exception as e:  # noqa: BLE001 - re-raised below unless another error is
      first = first or e
  if first is not None and not unwinding:
    raise first


def _plan(rc, seeds, workdir: str, options: RunOptions):
  """``(options, config, paths)``: the options with ``eval_every`` filled in,
  the ``config.json`` a run of these settings writes (and a resume must
  match), and the workdir's file paths -- from the configs alone."""
  num_train = rc.task.num_train
  steps_per_epoch = rc.train.steps_per_epoch(num_train)
  options = dataclasses.replace(options, eval_every=options.eval_every or steps_per_epoch)
  config = {"run": rc.to_dict(), "seeds": list(seeds), "eval_every": options.eval_every,
            "total_steps": rc.train.total_steps(num_train), "steps_per_epoch": steps_per_epoch}
  if rc.task.is_lm:  # what was read, so that a resume on other text is refused
    config["corpus"] = tasks.check_corpus(rc.task)
  if options.record_spectra:
    config["record_spectra"] = options.record_spectra
  if options.record_curvature:
    config["record_curvature"] = options.record_curvature
  paths = {k: os.path.join(workdir, v) for k, v in dict(
      config="config.json", metrics="metrics.jsonl", summary="summary.json",
      plot="accuracy.png", ckpt="ckpt", spectra="spectra.jsonl",
      curvature="curvature.jsonl", steps="steps.jsonl").items()}
  return options, config, paths


class _Session(NamedTuple):
  """What one training session of a run works with (fixed while it runs)."""
  rc: Any
  seeds: list
  workdir: str
  paths: dict
  steps: Steps
  mesh: Any
  keys: Any           # the seeds' key material, placed on the mesh
  arrays: dict        # the placed data: train/test ids and labels, the train-eval subset
  writer: bool        # process 0: the one that writes files
  notify: Callable[[str], None]  # one-line notices (Hooks.notify)


def _session(rc, seeds, workdir, paths, options: RunOptions, notify) -> _Session:
  """The run's fixed pieces: the data generated and checked, the seeds' mesh
  and group, the pure steps, and the data and the seeds' keys placed on the
  mesh."""
  num_train = rc.task.num_train
  data = tasks.generate(rc.task)
  for ids in (data.train_ids, data.test_ids):  # once, before anything compiles
    check_token_ids(ids, rc.model.vocab_size)
  if not rc.task.is_lm and data.train_ids.shape[0] != num_train:
    raise AssertionError(f"generated {data.train_ids.shape[0]} training examples, the "
                         f"config says {num_train}")
  mesh = seed_mesh(len(seeds))
  seed_group = options.seed_group
  if seed_group == "auto":
    seed_group = None if mesh is not None else auto_seed_group(
        rc.model, rc.task, rc.train, num_train=num_train, num_seeds=len(seeds),
        memory_gib=options.memory_gib, fraction=options.memory_fraction, notify=notify)
  steps = make_steps(rc.model, rc.task, rc.train, num_train,
                     seed_group=seed_group if mesh is None else None)
  if steps.total_steps != rc.train.total_steps(num_train):
    raise AssertionError(f"the steps have {steps.total_steps} steps, the config "
                         f"{rc.train.total_steps(num_train)}")
  if data.train_eval_ids is not None:  # lm: fixed windows of the training split
    n_sub = min(rc.train.train_eval_examples, data.train_eval_ids.shape[0])
    sub = (data.train_eval_ids[:n_sub], jnp.zeros((n_sub,), jnp.int32))
  else:
    n_sub = min(rc.train.train_eval_examples, data.train_ids.shape[0])
    sub = (data.train_ids[:n_sub], data.train_labels[:n_sub])
  placed = devices.replicate((data.train_ids, data.train_labels, data.test_ids,
                              data.test_labels, *sub), mesh)
  return _Session(rc, list(seeds), workdir, paths, steps, mesh,
                  devices.shard(train_lib.seed_keys(seeds), mesh),
                  dict(zip(("train_ids", "train_labels", "test_ids", "test_labels",
                            "sub_ids", "sub_labels"), placed)),
                  jax.process_index() == 0, notify)


def _resume_or_init(session: _Session, ckpt, *, resume, unfinished, notify, recorders):
  """``(states, step, elapsed, records, pending, call)``: the newest checkpoint
  that verifies (newer ones that do not are deleted) and the evaluations up to
  it, or a fresh init; every recorder's file is cut back to that step.
  ``pending``: the losses ``[seeds, steps]`` of an interval that a stop cut (a
  checkpoint between evaluations), else None; ``call``: the run's call length
  (``RunOptions.call_seconds``) if one was fixed."""
  paths, workdir, total = session.paths, session.workdir, session.steps.total_steps
  step, elapsed, pending, call = 0, 0.0, None, None
  kept_steps = ckpt.all_steps() if resume else []
  if kept_steps:
    try:
      states, meta, step, skipped = ckpt.restore_verified(
          session.steps.abstract_state(len(session.seeds), session.mesh))
    except CheckpointError as e:
      raise CheckpointError(e.reason, Remedy.START_OVER) from None
    if skipped and session.writer:
      for bad in [s for s in kept_steps if s > step]:  # retrained and saved again
        ckpt.delete(bad)
    step, elapsed = int(meta["step"]), float(meta["elapsed"])
    if meta.get("interval_losses") is not None:
      pending = np.asarray(meta["interval_losses"], np.float32)
    call = meta.get("call_steps")
    why = skipped + [f"step {u}: its save was cut off (removed)" for u in unfinished]
    notify(f"resuming {workdir} from step {step} of {total}"
           + (f" (skipped: {'; '.join(why)})" if why else ""))
    # a cut-off last row lies past the checkpoint: its recorder's truncate says so below
    records = [r for r in read_jsonl(paths["metrics"], cut_off=lambda _: None)
               if r.get("step", np.inf) <= step]
    evaluated = step - (0 if pending is None else pending.shape[1])  # the last evaluation
    if evaluated and (not records or records[-1]["step"] != evaluated):
      raise BadFileError(
          f"{paths['metrics']} lacks the evaluation of step {evaluated}, which the "
          "checkpoint has passed (the file was cut or edited): restore it from a copy if "
          "you have one", Remedy.START_OVER)
  else:
    states = train_lib.jit_init(session.steps)(session.keys)
    records = []
    if unfinished:
      notify(f"{workdir}: no finished checkpoint, starting at step 0 (the cut-off save "
             f"of step {', '.join(unfinished)} was removed)")
  if session.writer:  # drop evaluations past the checkpoint (they will be redone)
    for r in recorders:
      r.truncate(session, step)
  return states, step, elapsed, records, pending, call


def _metrics_row(session, step, losses, test_acc, test_loss, train_acc, elapsed) -> dict:
  """The ``metrics.jsonl`` row of the evaluation at ``step`` (strict JSON)."""
  rec = {"step": step, "epoch": step / session.steps.steps_per_epoch,
         "examples_seen": step * session.rc.train.batch_size,  # per seed
         "train_loss": losses.mean(1).tolist(),
         "test_loss": np.asarray(test_loss).tolist(),
         "test_accuracy": np.asarray(test_acc).tolist(),
         "train_accuracy": np.asarray(train_acc).tolist(),
         "elapsed": elapsed}
  return {key: json_safe(v) for key, v in rec.items()}


class _Pace:
  """The progress row after each evaluation, with the ETA at this session's
  mean pace, so that one chunk slowed (or sped) by a neighbour on a shared
  machine does not swing it. Measured work only: the first chunk's
  compilation is left out (and so is its recording, which also compiles;
  later chunks count it)."""

  def __init__(self, call_seconds: Optional[float] = None, call: Optional[int] = None):
    self.first, self.spent_s, self.spent_steps = True, 0.0, 0
    self.call_seconds, self.step_s = call_seconds, None
    self.call = call if call_seconds is not None else None

  def ran(self, steps: int, seconds: float) -> None:
    """A call's execution (its compilation left out) took ``seconds``."""
    if self.step_s is None:
      self.step_s = max(seconds, 1e-9) / steps

  def call_steps(self, remaining: int) -> int:
    """Steps of the next compiled call: all that remain to the evaluation,
    or, with ``call_seconds``, at most that many seconds' worth at the first
    call's pace, rounded down to a power of two -- then fixed for the run
    (each call length is a program to compile; the checkpoints carry it to
    the next session, where the compilation cache has its programs)."""
    if self.call_seconds is None or (self.call is None and self.step_s is None):
      return remaining
    if self.call is None:
      self.call = max(2, 2 ** int(np.log2(max(self.call_seconds / self.step_s, 1.0))))
    if remaining > self.call and remaining % self.call == 1:
      # never a call of one step out of a longer interval (XLA inlines a
      # one-step loop, which changes the bits): one longer call first, so
      # that an interval takes two call lengths at most
      return self.call + 1
    return min(remaining, self.call)

  def row(self, losses, test_acc, test_loss, train_acc, *, step, total, k, dt, compile_s,
          rec_s) -> dict:
    run_s = max(dt - compile_s, 1e-9)
    chunk_s = run_s + (0.0 if self.first else rec_s)
    self.spent_s, self.spent_steps = self.spent_s + chunk_s, self.spent_steps + k
    first, self.first = self.first, False
    return {"step": step, "total": total, "steps_per_s": k / run_s,
            "eta_s": (total - step) * self.spent_s / self.spent_steps, "chunk_s": chunk_s,
            "compile_s": compile_s if first else None,
            "loss_mean": float(losses.mean()),
            "loss_std": float(losses.mean(1).std()),
            "test_accuracy_mean": float(np.mean(test_acc)),
            "test_loss_mean": float(np.mean(test_loss)),
            "train_accuracy_mean": float(np.mean(train_acc))}

def _check_finite(session, ckpt, states, losses, step: int, k: int) -> None:
  """Losses are measured before each update, so the last update of a chunk
  can break the state with every loss finite: the state is checked as well,
  and a checkpoint that is not finite is never saved."""
  fetch = devices.fetch
  ok = np.isfinite(losses).all(1) & fetch(train_lib.finite(states))
  if not ok.all():
    bad = [s for s, good in zip(session.seeds, ok) if not good]
    last_good = ckpt.latest_step()
    kept = (f"The last good checkpoint (step {last_good}) is kept in {session.paths['ckpt']}"
            if last_good is not None else
            "No checkpoint was saved (the run diverged before its first evaluation)")
    raise NonFiniteLossError(
        f"non-finite loss or parameters between steps {step} and {step + k} for "
        f"seeds {bad}; stopping. {kept}", Remedy.LOWER_LEARNING_RATE)


def _evaluate(session, states):
  """``(test accuracy, test loss, train accuracy)`` per seed, on the host."""
  evaluate, fetch, arr = train_lib.jit_evaluate(session.steps), devices.fetch, session.arrays
  test_eval = evaluate(states["params"], arr["test_ids"], arr["test_labels"])
  train_eval = evaluate(states["params"], arr["sub_ids"], arr["sub_labels"])[0]
  test_acc, test_loss = map(fetch, test_eval)
  return test_acc, test_loss, fetch(train_eval)


def host_environment() -> dict:
  """What produced the numbers, beyond the config: the library versions and
  the host CPU (its model and whether it has AVX-512, which changes float
  rounding and so per-seed digits; a run whose training is chaotic, like the
  paper's optimiser's, can then end elsewhere). Recorded in ``summary.json``
  for the session that finished the run."""
  import platform
  from importlib import metadata
  versions = {"python": platform.python_version()}
  for pkg in ("jax", "jaxlib", "flax", "optax", "numpy"):
    try:
      versions[pkg] = metadata.version(pkg)
    except metadata.PackageNotFoundError:
      versions[pkg] = None
  cpu = {"machine": platform.machine(), "model": platform.processor() or None,
         "avx512": None}
  try:
    with open("/proc/cpuinfo") as f:
      info = f.read().split("\n\n")[0]
  except OSError:
    info = ""
  fields = {}
  for line in info.splitlines():
    key, _, value = line.partition(":")
    fields.setdefault(key.strip(), value.strip())
  if fields:
    cpu["model"] = fields.get("model name") or cpu["model"]
    if "cpu family" in fields and "model" in fields:
      cpu["family_model"] = f"{fields['cpu family']}/{fields['model']}"
    flag_list = (fields.get("flags") or fields.get("Features") or "").split()
    cpu["avx512"] = "avx512f" in flag_list
  cpu["cores"] = os.cpu_count()
  return {"versions": versions, "cpu": cpu}


def summarise(session: _Session, records: list, *, t_start: float) -> dict:
  """The ``summary.json`` of a finished run, from its evaluations (computes;
  writes nothing)."""
  rc, seeds, paths = session.rc, session.seeds, session.paths
  total = session.steps.total_steps
  if not records or records[-1]["step"] != total:
    raise CheckpointError(
        f"{paths['metrics']} lacks the evaluations up to step {total} that the "
        f"checkpoint has passed", Remedy.START_OVER)
  last = records[-1]
  test = np.asarray(last["test_accuracy"])
  device = jax.devices()[0]
  summary = {
      "pe": rc.model.pe, "task": rc.task.name, "preset": rc.preset,
      "faithful": rc.model.faithful,
      "rope_heads": encodings.rope_heads_option(rc.model),
      "seeds": list(seeds), "steps": total,
      "test_accuracy": test.tolist(), "test_accuracy_mean": float(test.mean()),
      "test_accuracy_std": float(test.std(ddof=1)) if len(test) > 1 else 0.0,
      "train_accuracy": last["train_accuracy"],
      "examples_seen": total * rc.train.batch_size,
      "plateau": stats.plateau(records),
      "backend": jax.default_backend(),
      "device_kind": getattr(device, "device_kind", str(device)),
      "num_devices": jax.device_count(),
      "wall_seconds": last["elapsed"],
      "session_wall_seconds": time.time() - t_start,
      "environment": host_environment(),
  }
  if rc.task.is_lm:  # bytes are the tokens: nats per token / ln 2 = bits per byte
    bpb = np.asarray(last["test_loss"]) / np.log(2.0)
    summary.update({"test_bits_per_byte": bpb.tolist(),
                    "test_bits_per_byte_mean": float(bpb.mean()),
                    "test_bits_per_byte_std": float(bpb.std(ddof=1)) if len(bpb) > 1 else 0.0,
                    "evaluated_on": "validation split, fixed windows",
                    "unigram_bits_per_byte": tasks.load_corpus(
                        rc.task.corpus).unigram_bits_per_byte("valid")})
  return summary


def draw_figures(session: _Session, records: list, *, spectra: bool) -> None:
  """The run's figures: ``accuracy.png``, and ``spectra.png`` when recorded."""
  rc, paths = session.rc, session.paths
  title = f"{rc.task.name} / {rc.model.pe}" + (" (faithful)" if rc.model.faithful else "")
  plotting.accuracy_curves(records, paths["plot"], title)
  if spectra:
    plotting.spectra_over_training(read_jsonl(paths["spectra"]),
                                   os.path.join(session.workdir, "spectra.png"), title)
  freq = os.path.join(session.workdir, "frequencies.jsonl")
  if rc.model.encoding.frequency_param and os.path.exists(freq):
    plotting.frequencies_over_training(read_jsonl(freq), rc.model.encoding.frequencies(rc.model),
                                       os.path.join(session.workdir, "frequencies.png"), title)


class LoadedRun(NamedTuple):
  """A trained run as :func:`load_run` restores it."""
  config: dict        # config.json
  rc: Any             # config.RunConfig
  steps: Steps        # its pure functions (train.make_steps)
  states: Any         # seed-stacked train state of the checkpoint
  data: Any           # tasks.Dataset, regenerated from the config
  step: int           # the checkpoint's step
  mesh: Any           # the seeds' device mesh (None on one device)


def load_run(workdir: str, notify: Callable[[str], None] = _notify_stderr, *,
             seed_group: Optional[int] = None) -> LoadedRun:
  """Reloads a trained run as a :class:`LoadedRun` (config, rc, steps,
  states, data, step, mesh).

  The run config is rebuilt with ``config.RunConfig.from_dict``; the dataset is
  regenerated from its ``data_seed`` (deterministic), the
  state restored from the newest checkpoint that verifies (shapes, finite,
  checksum; ``Checkpointer.restore_verified``). One line goes to ``notify``:
  the step analysed, any skipped newer checkpoint, and a warning when the run
  is still training or has not finished. With no usable checkpoint,
  :class:`CheckpointError`. ``seed_group``: the steps' (their evaluation and
  the ablation vmap that many seeds at a time; a memory option, single device).
  """
  config_path = os.path.join(workdir, "config.json")
  config = read_config(config_path)
  try:
    rc = RunConfig.from_dict(config["run"])
  except (KeyError, TypeError, ValueError) as e:
    raise BadFileError(f"{config_path} holds settings this code cannot build ({e!r:.80}): "
                       "restore it if you can") from None
  data = tasks.generate(rc.task)
  seeds = config["seeds"]
  mesh = seed_mesh(len(seeds))
  num_train = rc.task.num_train if rc.task.is_lm else data.train_ids.shape[0]
  steps = make_steps(rc.model, rc.task, rc.train, num_train,
                     seed_group=seed_group if mesh is None else None)
  if not os.path.isdir(os.path.join(workdir, "ckpt")):  # do not create an empty one
    raise CheckpointError(f"no checkpoint under {workdir}/ckpt")
  abstract = steps.abstract_state(len(seeds), mesh)
  for attempt in range(3):
    # Only finished saves are listed (orbax writes a save into a temporary
    # folder and renames it when complete); a run that trains may still delete
    # the one being read (keep-last-N), so a failed read of a training run's
    # checkpoints lists them again.
    ckpt = Checkpointer(os.path.join(workdir, "ckpt"), fetch=devices.fetch, read_only=True)
    try:
      states, _, step, skipped = ckpt.restore_verified(abstract)
      break
    except CheckpointError as e:
      if e.other_model:
        raise BadFileError(f"{config_path} describes another model than its checkpoints "
                           f"hold ({e.reason}): was it edited? Restore it") from None
      if attempt == 2 or lock_holder(workdir) is None:
        raise
    finally:
      ckpt.close()
  total = config.get("total_steps", steps.total_steps)
  line = f"{workdir}: analysing the checkpoint of step {step} of {total}"
  if skipped:
    line += " (skipped: " + "; ".join(skipped) + ")"
  holder = lock_holder(workdir)
  if holder is not None:
    line += (f"; WARNING: the run is still training ({holder}): these numbers are of "
             "a partly trained model")
  elif not os.path.exists(os.path.join(workdir, "summary.json")) or step < total:
    line += ("; WARNING: the run has not finished (rerun its sweep command to finish it): "
             "these numbers are of a partly trained model")
  notify(line)
  return LoadedRun(config, rc, steps, states, data, step, mesh)

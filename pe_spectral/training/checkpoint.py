"""The one place that talks to orbax.

A checkpoint holds the seed-stacked train state (``StandardSave``) and a JSON
metadata item (step, elapsed time, and a checksum of the state). Saves are
asynchronous; call :meth:`Checkpointer.close` (or use it as a context manager)
so the last save is awaited before the process exits.

:meth:`Checkpointer.restore_verified` never hands back a state it cannot vouch
for: it restores the newest step whose files load, whose arrays have the
expected shapes and dtypes, are finite, and match the checksum stored at save
time (flipped bytes in a data file otherwise restore silently as wrong numbers);
failing that, the next older kept step, saying why the newer one was skipped.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import inspect
import logging as std_logging
import os
import pathlib
import shutil
import sys
import threading
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from pe_spectral.runtime.errors import Remedy, RunError

__all__ = ["Checkpointer", "CheckpointError", "DiskFullError", "tree_checksum",
           "remove_unfinished_saves"]


class CheckpointError(RunError):
  """No kept checkpoint of a workdir can be used (``remedy`` says what to do).
  ``other_model``: every kept checkpoint stores other arrays (shapes, dtypes or
  their number) than the model it was restored for: the config that asked for
  them is not the one that trained them."""

  def __init__(self, reason: str, remedy: Optional[Remedy] = None, *,
               other_model: bool = False):
    super().__init__(reason, remedy)
    self.other_model = other_model


class DiskFullError(RunError):
  """A checkpoint did not fit on its filesystem: where, how many bytes it
  needs and how many were free. The checkpoints saved before it are intact,
  and a save it cut off is removed when the run resumes."""


# How a full filesystem (or an exhausted quota) reads in the errors that
# orbax and TensorStore raise from their writer threads.
_NO_SPACE = ("No space left on device", "Disk quota exceeded", f"os_error_code='{errno.ENOSPC}'",
             f"os_error_code='{errno.EDQUOT}'")


def is_disk_full(e: BaseException) -> bool:
  """Whether ``e`` (or an exception it was raised from) says the disk is full."""
  while e is not None:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if any(text in str(e) for text in _NO_SPACE):
      return True
    e = e.__cause__ or e.__context__
  return False


class _DropDiskFull(std_logging.Filter):
  """Orbax logs a full disk at ERROR, with a traceback, from each of its
  writer threads before the save raises; the run reports it in one line
  (:class:`DiskFullError`), so those records are dropped."""

  def filter(self, record):
    text = record.getMessage() + (str(record.exc_info[1]) if record.exc_info else "")
    return not any(t in text for t in _NO_SPACE)


_DROP_DISK_FULL = _DropDiskFull()


def _mib(n: float) -> str:
  return f"{n / 2**20:.1f} MiB"


def _leaf_checksum(x: jax.Array) -> jax.Array:
  """A ``uint32`` digest of one array's bits, order-independent to compute.

  ``Σ_i bits_i · (2i + 1)`` and ``Σ_i (bits_i xor (2i + 1))``, both modulo
  2³², combined: any change of a single element changes the first sum (its
  weight is odd), and exact integer sums give the same value on every backend
  and sharding.
  """
  x = jnp.asarray(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  bits = jax.lax.bitcast_convert_type(x, width).astype(jnp.uint32).reshape(-1)
  w = jnp.arange(bits.shape[0], dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1)
  return (jnp.sum(bits * w, dtype=jnp.uint32)
          ^ (jnp.sum(bits ^ w, dtype=jnp.uint32) * jnp.uint32(0x9E3779B1)))


# One small program per leaf shape and dtype rather than one per model: a model's
# leaves share a handful of shapes, and so do the PEs that one process reads (a
# comma list of workdirs). One program over the whole tree was traced and compiled
# again for every PE (0.9 s a workdir on a 2-core CPU, two thirds of it tracing).
_leaf_digest = jax.jit(_leaf_checksum)
_leaf_finite = jax.jit(lambda x: jnp.isfinite(x).all())


def tree_checksum(tree) -> jax.Array:
  """``uint32 [num_leaves]``: :func:`_leaf_checksum` of every leaf of ``tree``
  (one jitted call per leaf; inlined when called under ``jit``)."""
  return jnp.stack([_leaf_digest(x) for x in jax.tree.leaves(tree)])


def _finite(tree) -> jax.Array:
  """Whether every inexact leaf of ``tree`` is finite, one jitted call per leaf."""
  return jnp.stack([_leaf_finite(x) for x in jax.tree.leaves(tree)
                    if jnp.issubdtype(x.dtype, jnp.inexact)] or [jnp.bool_(True)]).all()


@contextlib.contextmanager
def _quiet_orbax():
  """Orbax logs a parse failure at ERROR before raising it; the caller reports
  the failure in one line instead."""
  loggers = [std_logging.getLogger(n) for n in ("absl", "orbax")]
  levels = [lg.level for lg in loggers]
  for lg in loggers:
    lg.setLevel(std_logging.CRITICAL)
  try:
    yield
  finally:
    for lg, lv in zip(loggers, levels):
      lg.setLevel(lv)


# What orbax leaves behind when a restore fails part-way: its other shard
# reads are abandoned in an event loop it has closed. When TensorStore's
# threads finish them (during the restore or some time after it), closing them
# raises into the void: "Exception ignored in: <coroutine object
# _read_array_index_and_device_put>" with the whole TensorStore spec, and
# "RuntimeError: Event loop is closed" from a read's done-callback. The failure
# itself is reported in one line; these are noise. They are told by where the
# coroutine's code lives (orbax's package), not by its name: naming one of
# orbax's private coroutines held orbax below its next release.
_ORBAX_DIR = os.path.dirname(os.path.abspath(ocp.__file__)) + os.sep


def _orbax_coroutine(obj) -> bool:
  """Whether ``obj`` is a coroutine whose code is orbax's own."""
  code = getattr(obj, "cr_code", None) if inspect.iscoroutine(obj) else None
  return code is not None and os.path.abspath(code.co_filename).startswith(_ORBAX_DIR)


def _abandoned_read(u) -> bool:
  if _orbax_coroutine(u.object):
    return True
  return u.object is None and _closed_loop_callback(u.exc_value)


def _loop_closed(exc) -> bool:
  return isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed"


class _DropLoopClosed(std_logging.Filter):
  """asyncio's "Exception in callback" records of a closed loop's callbacks."""

  def filter(self, record):
    return not (record.exc_info and _loop_closed(record.exc_info[1]))


def _closed_loop_callback(exc) -> bool:
  """``RuntimeError("Event loop is closed")`` raised where a TensorStore
  thread hands a finished write back to orbax's event loop
  (``call_soon_threadsafe``) after orbax has closed that loop."""
  if not _loop_closed(exc):
    return False
  tb = exc.__traceback__
  names = []
  while tb is not None:
    names.append(tb.tb_frame.f_code.co_name)
    tb = tb.tb_next
  return "call_soon_threadsafe" in names


def _drop_abandoned_writes() -> None:
  """When a save fails part-way (a full disk is the usual cause), orbax
  closes its event loop and abandons the other shard writes, like the reads
  above. TensorStore's threads finish them anyway, while the save is still
  being torn down (before orbax raises to us) or as the process exits, and
  each one prints a bare "Traceback ... RuntimeError: Event loop is closed"
  (unraisable, from a thread, or through asyncio's logger): dozens of them.
  The failure itself is reported in one line by :class:`Checkpointer`, so
  these, and only these, are dropped for the rest of the process; it is
  installed with the first Checkpointer because the noise starts before the
  failing save returns. Every other error goes on to the hook that was in
  place."""
  if getattr(sys.unraisablehook, "drops_abandoned_writes", False):
    return
  previous_unraisable, previous_thread = sys.unraisablehook, threading.excepthook

  def unraisable(u):
    if not _abandoned_read(u):  # the same two kinds of noise as an abandoned read
      previous_unraisable(u)

  def thread(args):
    if not _closed_loop_callback(args.exc_value):
      previous_thread(args)

  unraisable.drops_abandoned_writes = True
  sys.unraisablehook, threading.excepthook = unraisable, thread
  std_logging.getLogger("asyncio").addFilter(_DropLoopClosed())


@contextlib.contextmanager
def _drop_abandoned_reads():
  """Drops the close-time errors of orbax's abandoned reads while a restore
  runs; every other unraisable exception goes on to the hook that was in
  place. If the restore raises, the filter stays installed for the rest of
  the process, because the abandoned reads may finish after it returns."""
  if getattr(sys.unraisablehook, "drops_abandoned_reads", False):
    yield
    return
  previous = sys.unraisablehook

  def hook(u):
    if not _abandoned_read(u):
      previous(u)

  hook.drops_abandoned_reads = True
  sys.unraisablehook = hook
  yield  # an exception propagates from here and skips the line below
  if sys.unraisablehook is hook:
    sys.unraisablehook = previous


def remove_unfinished_saves(ckpt_dir: str) -> list[str]:
  """Deletes the temporary folders of checkpoint saves that a killed run left
  (orbax would warn about each, once per save); returns their steps, in step
  order. Orbax names them (``ocp.path.step.tmp_checkpoints``); the deletion is
  done here, at once, because orbax's own (``cleanup_tmp_directories``) runs in
  a background thread that only the next save waits for."""
  if not os.path.isdir(ckpt_dir):
    return []
  found = sorted(ocp.path.step.tmp_checkpoints(ckpt_dir),
                 key=lambda d: (int(d.split(".", 1)[0]) if d.split(".", 1)[0].isdigit()
                                else -1, d))
  for d in found:
    shutil.rmtree(os.path.join(ckpt_dir, d), ignore_errors=True)
  return [d.split(".", 1)[0] for d in found]


def _first_line(e: BaseException, limit: int = 100) -> str:
  text = str(e).strip().splitlines()
  text = text[0] if text else ""
  return f"{type(e).__name__}: {text[:limit]}" if text else type(e).__name__


class Checkpointer:
  """Keep-last-N checkpoints of a train state under ``directory``.

  Args:
    directory: where the step folders live (created).
    max_to_keep: how many steps are kept.
    fetch: turns a (possibly multi-process sharded) array into a host NumPy
      array (``devices.fetch``); default ``np.asarray``.
  """

  def __init__(self, directory: str, *, max_to_keep: int = 2,
               fetch: Optional[Callable[[Any], np.ndarray]] = None, read_only: bool = False):
    self.directory = os.path.abspath(directory)
    self._fetch = fetch or np.asarray
    # read_only: an analysis beside a run that trains changes nothing there
    # (orbax warns that it keeps every step and that the folder is read-only:
    # both what a reader means, so not said)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None if read_only else max_to_keep, create=not read_only,
        read_only=read_only, **({"save_interval_steps": 0} if read_only else {}))
    with _quiet_orbax() if read_only else contextlib.nullcontext():
      self._manager = ocp.CheckpointManager(self.directory, options=options)
    self._pending = (None, 0)  # the last save started: (step, bytes it needed)
    for name in ("absl", "orbax", "asyncio"):
      std_logging.getLogger(name).addFilter(_DROP_DISK_FULL)
    _drop_abandoned_writes()

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def checksum(self, state) -> list[int]:
    """The checksum stored with a save of ``state`` (one int per leaf)."""
    return [int(v) for v in self._fetch(tree_checksum(state))]

  def bytes_needed(self, state: Any) -> int:
    """What a save of ``state`` takes on disk: the arrays' bytes plus 64 KiB
    of metadata, or the newest finished checkpoint's measured size if that is
    more (call it with no save in flight)."""
    need = sum(x.nbytes for x in jax.tree.leaves(state)) + 2**16
    step = self.latest_step()
    if step is not None:
      folder = os.path.join(self.directory, str(step))
      need = max(need, sum(os.path.getsize(os.path.join(d, f))
                           for d, _, files in os.walk(folder) for f in files))
    return need

  def _full(self, step: int, need: int, what: str) -> DiskFullError:
    free = shutil.disk_usage(self.directory).free
    return DiskFullError(f"no space for the checkpoint of step {step} in {self.directory}: "
                         f"{what} about {_mib(need)}, and {_mib(free)} is free",
                         Remedy.FREE_SPACE)

  def save(self, step: int, state: Any, meta: dict) -> None:
    """Starts an asynchronous save of ``state`` and ``meta`` (plus the state's
    checksum) at ``step``. Raises :class:`DiskFullError` at once when the
    filesystem's free space is below :meth:`bytes_needed` (a cheap check),
    and when the write itself, or the one before it, ran out of space."""
    self.wait()  # the previous save, as orbax's own save would; raises its full disk
    need = self.bytes_needed(state)
    if shutil.disk_usage(self.directory).free < need:
      raise self._full(step, need, "it needs")
    meta = dict(meta, checksum=self.checksum(state))
    try:
      self._manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))
    except Exception as e:
      if is_disk_full(e):
        raise self._full(step, need, "its write ran out of space; it needs") from None
      raise
    self._pending = (step, need)

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """Restores ``(state, meta)`` as stored, unverified; ``abstract_state``
    gives shapes/shardings. Prefer :meth:`restore_verified`."""
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        meta=ocp.args.JsonRestore()))
    return out["state"], out["meta"]

  def _other_arrays(self, step: int, abstract_state: Any) -> Optional[str]:
    """Why the arrays stored at ``step`` (their shapes and dtypes, read from
    orbax's metadata without restoring them) cannot be the model's that
    ``abstract_state`` describes, or None when they can (or when the metadata
    cannot be read: the restore then says what is wrong)."""
    try:
      stored = ocp.StandardCheckpointHandler().metadata(
          pathlib.Path(self.directory, str(step), "state"))
      stored = jax.tree.leaves(getattr(stored, "item_metadata", stored))
      have, want = (collections.Counter(f"{tuple(a.shape)} {np.dtype(a.dtype)}" for a in arrays)
                    for arrays in (stored, jax.tree.leaves(abstract_state)))
    except Exception:  # noqa: BLE001 - no or unreadable metadata (or a dtype numpy does
      return None      # not name, e.g. a PRNG key's): the restore says what is wrong
    if have == want:
      return None
    extra, missing = sorted((have - want).elements()), sorted((want - have).elements())
    if extra and missing:
      return f"an array of shape {extra[0]} where the run's config needs {missing[0]}"
    return (f"{sum(have.values())} arrays where the run's config needs "
            f"{sum(want.values())}")

  def _problem(self, state, meta, abstract_state) -> Optional[str]:
    """Why a restored ``(state, meta)`` cannot be used, or None."""
    if not isinstance(meta, dict) or "checksum" not in meta:
      return "no checksum in its metadata"
    got = jax.tree.structure(state)
    if got != jax.tree.structure(abstract_state):
      return "its arrays do not match the run's model"
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(abstract_state)):
      if a.shape != b.shape or a.dtype != b.dtype:
        return (f"an array of shape {a.shape} {a.dtype} where the run's config "
                f"needs {b.shape} {b.dtype}")
    if not bool(self._fetch(_finite(state))):
      return "non-finite values"
    if self.checksum(state) != list(meta["checksum"]):
      return "checksum mismatch (the files were altered after saving)"
    return None

  def restore_verified(self, abstract_state: Any, *,
                       steps: Optional[list[int]] = None
                       ) -> tuple[Any, dict, int, list[str]]:
    """The newest usable kept checkpoint.

    Tries ``steps`` (default: every kept step), newest first, and returns
    ``(state, meta, step, skipped)`` for the first that loads and verifies
    (shapes, finiteness, checksum); ``skipped`` says, one string per newer
    step, why it was passed over. Raises :class:`CheckpointError` (one line)
    when none is usable.
    """
    skipped = []
    with _quiet_orbax():
      try:
        candidates = sorted(self.all_steps() if steps is None else steps, reverse=True)
      except Exception as e:  # noqa: BLE001 - unreadable step folders
        raise CheckpointError(f"cannot list the checkpoints in {self.directory} "
                              f"({_first_line(e)})") from None
      other = 0  # steps that store another model's arrays
      for step in candidates:
        why = self._other_arrays(step, abstract_state)
        if why is not None:
          skipped.append(f"step {step}: {why}")
          other += 1
          continue
        try:
          with _drop_abandoned_reads():
            state, meta = self.restore(step, abstract_state)
        except Exception as e:  # noqa: BLE001 - orbax/TensorStore/JSON errors
          skipped.append(f"step {step}: unreadable ({_first_line(e)})")
          continue
        why = self._problem(state, meta, abstract_state)
        if why is None:
          return state, meta, step, skipped
        skipped.append(f"step {step}: {why}")
    if not candidates:
      raise CheckpointError(f"no checkpoint in {self.directory}")
    raise CheckpointError(
        f"no usable checkpoint in {self.directory} (" + "; ".join(skipped) + ")",
        other_model=other == len(candidates))

  def delete(self, step: int) -> None:
    """Removes a kept step (e.g. one that failed verification)."""
    try:
      self._manager.delete(step)
    except Exception:  # noqa: BLE001 - a step too broken for orbax to delete
      shutil.rmtree(os.path.join(self.directory, str(step)), ignore_errors=True)
    self._manager.reload()

  def wait(self) -> None:
    """Waits for the last save; :class:`DiskFullError` if it ran out of space."""
    try:
      self._manager.wait_until_finished()
    except Exception as e:
      if is_disk_full(e):
        step, need = self._pending
        raise self._full(step, need, "its write ran out of space; it needs") from None
      raise

  def close(self) -> None:
    try:
      self.wait()
    finally:
      self._manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

"""A run's working directory, apart from training: the lock, strict JSON and
JSONL files, the config check that decides whether a run may resume there,
and the clean-up a resume needs (truncating files past the checkpoint,
removing saves a kill cut off). Each error is one line for the user.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import math
import os
import shutil
from typing import Callable, Optional

import jax

from pe_spectral.data import tasks
from pe_spectral.nn import model
from pe_spectral.runtime.errors import Remedy, RunError
from pe_spectral.training.checkpoint import remove_unfinished_saves

__all__ = ["ConfigMismatchError", "WorkdirBusyError", "BadFileError", "workdir_lock", "lock_holder",
           "json_safe", "write_json", "read_jsonl", "read_config", "config_diff", "truncate_jsonl",
           "remove_unfinished_saves", "check_workdir", "load_runs"]


class ConfigMismatchError(RunError):
  """The workdir holds a run with different settings."""


class WorkdirBusyError(RunError):
  """Another process is training in the same workdir."""


class BadFileError(RunError):
  """A run's file that is not what the run wrote: cut off, garbage, edited, or gone."""


@contextlib.contextmanager
def workdir_lock(workdir: str, notify: Optional[Callable[[str], None]] = None):
  """Holds ``workdir/.lock`` (an exclusive ``flock``) or raises
  :class:`WorkdirBusyError` naming the holder. The kernel releases the lock
  when its process exits, however it exits; a holder that ends normally also
  empties the file (whatever it raised), so a name left in it is a holder
  that died (kill -9, a signal's default action, a crash of the
  interpreter): ``notify`` is told, in one line, that its lock was taken
  over."""
  path = os.path.join(workdir, ".lock")
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
      raise WorkdirBusyError(
          f"{workdir} is in use by another run ({holder}); wait for it to finish",
          Remedy.OTHER_WORKDIR) from None
    dead = os.pread(fd, 200, 0).decode(errors="replace").strip()
    if dead and notify is not None:
      notify(f"took over the lock of {dead}, which ended without releasing it")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
    try:
      yield
    finally:
      os.ftruncate(fd, 0)  # released by this process, whatever it raised
  finally:
    os.close(fd)  # releases the lock


def lock_holder(workdir: str) -> Optional[str]:
  """Who holds ``workdir/.lock`` now (e.g. ``"pid 123 on host"``), or None;
  it changes nothing (an analysis may look at a run that is training)."""
  path = os.path.join(workdir, ".lock")
  if not os.path.exists(path):
    return None
  fd = os.open(path, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
      return os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None
  finally:
    os.close(fd)


def json_safe(x):
  """NaN/inf -> None (JSON null), so metrics.jsonl stays strict JSON."""
  if isinstance(x, list):
    return [json_safe(v) for v in x]
  return x if not isinstance(x, float) or math.isfinite(x) else None


def write_json(path: str, obj) -> None:
  """Atomic JSON write (temp file + rename): never a half-written file."""
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)


def read_jsonl(path: str, cut_off: Optional[Callable[[str], None]] = None) -> list[dict]:
  """The rows (JSON objects) of a JSONL file; none if it does not exist.

  A kill or a full disk can cut off the row being appended: a last line that
  does not parse is left out when ``cut_off`` is given (a resume, which redoes
  that evaluation anyway), and ``cut_off`` is told in one line; otherwise, and
  for any other line that is not a JSON object, :class:`BadFileError` names
  the file and the line."""
  if not os.path.exists(path):
    return []
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")
  last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
  rows = []
  for i, line in enumerate(lines[:last + 1]):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except ValueError:
      row = None
    if isinstance(row, dict):
      rows.append(row)
    elif i == last and cut_off is not None:
      cut_off(f"{path}: its last line was cut off (a write interrupted) and is left out; "
              "that evaluation is redone")
    else:
      raise BadFileError(
          f"{path}, line {i + 1}, is not a row this code wrote "
          f"({line[:40].decode(errors='replace')!r}): restore it from a copy if you have one",
          Remedy.START_OVER)
  return rows


def read_config(path: str) -> dict:
  """A run's ``config.json``; :class:`BadFileError` (one line) if it is not a
  JSON object, e.g. after a hand edit."""
  with open(path, "rb") as f:
    text = f.read()
  try:
    config = json.loads(text)
  except ValueError as e:
    raise BadFileError(f"{path} is not valid JSON ({e}): restore it if you can",
                       Remedy.START_OVER_OR_OTHER_WORKDIR) from None
  if not isinstance(config, dict):
    raise BadFileError(f"{path} holds no run's settings: restore it if you can",
                       Remedy.START_OVER_OR_OTHER_WORKDIR)
  return config


def config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
  keys = sorted(set(a) | set(b))
  out = []
  for k in keys:
    va, vb = a.get(k), b.get(k)
    if (k not in a and vb is None) or (k not in b and va is None):
      continue  # a field added later with its None default: same run
    if isinstance(va, dict) and isinstance(vb, dict):
      out += config_diff(va, vb, f"{prefix}{k}.")
    elif va != vb:
      out.append(f"{prefix}{k}: {va!r} -> {vb!r}")
  return out


def recorded(config: dict) -> dict:
  """A ``config.json`` dict as this code records it: only the model and task
  fields that apply to the run's PE and task (``ModelConfig.to_dict``,
  ``TaskConfig.to_dict``). Files written before that listed every field;
  comparing through this view lets them resume and leaves them untouched."""
  run = config.get("run")
  if not isinstance(run, dict) or "model" not in run or "task" not in run:
    return config
  try:
    recorded_model = model.recorded_fields(run["model"])
  except (KeyError, ValueError, TypeError):
    return config  # an unknown PE or option: compared as written
  return dict(config, run=dict(run, model=recorded_model,
                               task=tasks.recorded_fields(run["task"])))


def truncate_jsonl(path: str, step: int,
                   cut_off: Optional[Callable[[str], None]] = None) -> list[dict]:
  """Keeps the rows up to ``step`` (a resume's checkpoint), rewritten
  atomically; a cut-off last line goes as :func:`read_jsonl` says."""
  rows = [r for r in read_jsonl(path, cut_off) if r.get("step", math.inf) <= step]
  with open(path + ".tmp", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
  os.replace(path + ".tmp", path)
  return rows


def check_workdir(workdir, paths, config, resume) -> None:
  """Refuses a workdir whose run cannot be resumed under ``config``; with
  ``resume=False`` discards the earlier run. Then writes ``config.json``."""
  writer = jax.process_index() == 0
  if (resume and not os.path.exists(paths["config"]) and os.path.isdir(paths["ckpt"])
      and os.listdir(paths["ckpt"])):
    raise ConfigMismatchError(
        f"{workdir} holds checkpoints but no config.json, so the settings they were "
        "trained with cannot be verified", Remedy.START_OVER_OR_OTHER_WORKDIR)
  old, diff = None, []
  if os.path.exists(paths["config"]):
    old = recorded(read_config(paths["config"]))
    diff = config_diff(old, config)
    if resume and diff:
      raise ConfigMismatchError(
          f"{workdir} holds a run with different settings ("
          + "; ".join(diff[:6]) + ")", Remedy.START_OVER_OR_OTHER_WORKDIR)
  metrics, summary = paths.get("metrics"), paths.get("summary")
  if (resume and metrics and os.path.exists(metrics) and not os.path.isdir(paths["ckpt"])
      and not (summary and os.path.exists(summary))):
    done = read_jsonl(metrics, cut_off=lambda _: None)
    if done:  # a run that evaluated had made ckpt/ before: it was removed
      raise BadFileError(
          f"{paths['ckpt']} is gone, but {metrics} holds evaluations up to step "
          f"{done[-1].get('step')}: the run cannot resume from them (restore ckpt/ if you "
          "have a copy)", Remedy.START_OVER)
  if not resume and writer:  # discard an earlier run, with or without its config
    for key in ("metrics", "summary", "plot", "spectra", "curvature", "steps"):
      if os.path.exists(paths[key]):
        os.remove(paths[key])
    shutil.rmtree(paths["ckpt"], ignore_errors=True)
  # only after every check has passed; the same run (an older record of it
  # included, whatever its format): untouched
  if writer and (old is None or diff):
    write_json(paths["config"], config)


def load_runs(root: str, depth: int = 2) -> list[dict]:
  """The run directories ``root/<task>/<name>/`` (``depth`` 2), or
  ``root/<name>/`` (``depth`` 1, the pilots), each with its small files."""
  runs = []
  for path in sorted(glob.glob(os.path.join(root, *["*"] * depth, "summary.json"))):
    wd = os.path.dirname(path)
    with open(path) as f:
      s = json.load(f)
    s["workdir"] = wd
    s["name"] = os.path.basename(wd)
    for key, fname in (("ablation", "ablation.json"), ("decompose", "decompose.json")):
      extra = os.path.join(wd, fname)
      if os.path.exists(extra):
        with open(extra) as f:
          s[key] = json.load(f)
    s["ablations"] = {}
    for extra in sorted(glob.glob(os.path.join(wd, "ablation*.json"))):
      with open(extra) as f:
        s["ablations"][os.path.basename(extra)[:-5]] = json.load(f)
    s["records"] = read_jsonl(os.path.join(wd, "metrics.jsonl"))
    cfg = os.path.join(wd, "config.json")
    if os.path.exists(cfg):
      with open(cfg) as f:
        s["config"] = json.load(f)
    runs.append(s)
  return runs

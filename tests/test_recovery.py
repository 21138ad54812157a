"""Recovery that never keeps a bad state: verified restore with fallback, the
workdir lock, the stop request, strict-JSON metrics (in-process; smoke preset)."""
import fcntl
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.runtime.errors import Remedy
from pe_spectral.training import runner
from pe_spectral.training.checkpoint import Checkpointer, CheckpointError, tree_checksum

STATE = {"w": jnp.arange(1200, dtype=jnp.float32).reshape(12, 100) / 7,
         "count": jnp.arange(3, dtype=jnp.int32)}


def _largest_data_file(d, step):
  files = glob.glob(f"{d}/{step}/state/**/d/*", recursive=True)
  return max(files, key=os.path.getsize)


def _flip_byte(path, offset_frac=0.6):
  with open(path, "rb") as f:
    b = bytearray(f.read())
  i = int(len(b) * offset_frac)
  b[i] ^= 0xFF
  with open(path, "wb") as f:
    f.write(bytes(b))


def _wrong_checksum(d):
  path = f"{d}/2/meta/metadata"
  with open(path) as f:
    meta = json.load(f)
  meta["checksum"][0] = (meta["checksum"][0] + 1) % 2 ** 32
  with open(path, "w") as f:
    json.dump(meta, f)


FAULTS = {
    "values that disagree with the checksum": _wrong_checksum,
    "truncated data file": lambda d: open(_largest_data_file(d, 2), "r+b").truncate(64),
    "flipped bytes": lambda d: _flip_byte(_largest_data_file(d, 2)),
    "broken metadata": lambda d: open(f"{d}/2/meta/metadata", "w").write("{not json"),
    "broken array metadata": lambda d: open(f"{d}/2/state/_METADATA", "w").write("{"),
    "empty step dir": lambda d: os.makedirs(f"{d}/3"),
    "missing state": lambda d: shutil.rmtree(f"{d}/2/state"),
}


def _two_steps(d, second=None):
  with Checkpointer(d) as c:
    c.save(1, STATE, {"step": 1})
    c.save(2, second if second is not None else
           jax.tree.map(lambda x: x * 2, STATE), {"step": 2})


def test_checksum_changes_with_any_single_element_and_not_otherwise():
  base = np.asarray(tree_checksum(STATE))
  assert (np.asarray(tree_checksum(jax.tree.map(jnp.array, STATE))) == base).all()
  rng = np.random.default_rng(0)
  for _ in range(20):  # one element of one leaf nudged by one ulp
    i, j = rng.integers(12), rng.integers(100)
    w = STATE["w"].at[i, j].set(jnp.nextafter(STATE["w"][i, j], jnp.float32(1e9)))
    got = np.asarray(tree_checksum(dict(STATE, w=w)))
    assert got[1] != base[1] and got[0] == base[0]  # leaves in key order: count, w
  # two elements swapped: the sum of values is unchanged, the digest is not
  w = STATE["w"].at[0, 0].set(STATE["w"][0, 1]).at[0, 1].set(STATE["w"][0, 0])
  assert np.asarray(tree_checksum(dict(STATE, w=w)))[1] != base[1]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_restore_verified_falls_back_past_each_fault(fault, tmp_path):
  d = str(tmp_path / "ckpt")
  _two_steps(d)
  FAULTS[fault](d)
  abstract = jax.eval_shape(lambda: STATE)
  with Checkpointer(d) as c:
    state, meta, step, skipped = c.restore_verified(abstract)
  good = 2 if fault == "empty step dir" else 1  # the broken one is step 3 there
  assert step == good and meta["step"] == good
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(STATE)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b) * good)  # bit-exact
  assert len(skipped) == 1 and "\n" not in skipped[0]
  assert skipped[0].startswith(f"step {good + 1}:"), skipped
  if fault == "values that disagree with the checksum":
    assert "checksum mismatch" in skipped[0], skipped


def test_restore_verified_rejects_non_finite_and_wrong_shapes(tmp_path):
  d = str(tmp_path / "ckpt")
  _two_steps(d, second=dict(STATE, w=STATE["w"].at[3, 3].set(jnp.nan)))
  with Checkpointer(d) as c:
    _, _, step, skipped = c.restore_verified(jax.eval_shape(lambda: STATE))
  assert step == 1 and "non-finite" in skipped[0], skipped
  other = {"w": jax.ShapeDtypeStruct((12, 99), jnp.float32),
           "count": jax.ShapeDtypeStruct((3,), jnp.int32)}
  with Checkpointer(d) as c:
    with pytest.raises(CheckpointError) as e:
      c.restore_verified(other)
  assert "no usable checkpoint" in str(e.value) and "\n" not in str(e.value)
  assert "step 2" in str(e.value) and "step 1" in str(e.value)
  # read from the stored metadata, before any restore: another model's arrays
  assert e.value.other_model
  assert "an array of shape (12, 100) float32 where the run's config needs (12, 99)" in str(e.value)
  fewer = {"w": jax.ShapeDtypeStruct((12, 100), jnp.float32)}  # one array short
  with Checkpointer(d) as c:
    with pytest.raises(CheckpointError) as e:
      c.restore_verified(fewer)
  assert e.value.other_model and "2 arrays where the run's config needs 1" in str(e.value)


def test_damaged_checkpoints_of_the_right_model_are_not_another_model(tmp_path):
  """Both kept steps damaged (one truncated, one non-finite): no usable
  checkpoint, but not another model's (load_run would blame the config)."""
  d = str(tmp_path / "ckpt")
  _two_steps(d, second=dict(STATE, w=STATE["w"].at[3, 3].set(jnp.nan)))
  open(_largest_data_file(d, 1), "r+b").truncate(64)
  with Checkpointer(d) as c:
    with pytest.raises(CheckpointError) as e:
      c.restore_verified(jax.eval_shape(lambda: STATE))
  assert not e.value.other_model, str(e.value)


class _Pending:
  def __await__(self):
    yield


def _abandon(name, *, in_orbax=True):
  """A suspended coroutine called ``name`` whose close raises, dropped: the
  "Exception ignored in: <coroutine object ...>" that an abandoned orbax read
  gives when it is collected. ``in_orbax``: its code is filed under orbax's
  package, as an abandoned read's is; else under this test file."""
  import orbax.checkpoint as ocp
  where = os.path.join(os.path.dirname(ocp.__file__), "_abandoned.py") if in_orbax else __file__
  src = ("async def read(pending):\n"
         "  try:\n"
         "    await pending\n"
         "  finally:\n"
         "    raise Exception(NAME + ' failed')\n")
  ns = {"NAME": name}
  exec(compile(src, where, "exec"), ns)  # noqa: S102 - a coroutine filed under orbax's folder
  read = ns["read"]
  read.__qualname__ = name
  c = read(_Pending())
  c.send(None)
  del c


def _closed_loop_error():
  """The RuntimeError a TensorStore thread gets handing a result to a closed loop."""
  import asyncio
  loop = asyncio.new_event_loop()
  loop.close()
  try:
    loop.call_soon_threadsafe(print)
  except RuntimeError as e:
    return e


def test_abandoned_orbax_reads_are_dropped_and_nothing_else(monkeypatch):
  """The filter drops only orbax's abandoned-read errors, forwards the rest to
  the hook that was in place, leaves after a restore that worked and stays
  after one that failed (its reads may finish later)."""
  from pe_spectral.training.checkpoint import _drop_abandoned_reads
  read = "_read_array_index_and_device_put"  # orbax 0.12's; any coroutine of orbax's is dropped
  seen = []
  recorder = lambda u: seen.append(getattr(u.object, "__qualname__", None))
  monkeypatch.setattr(sys, "unraisablehook", recorder)
  with _drop_abandoned_reads():
    _abandon(read)
    _abandon("a_renamed_orbax_read")
    _abandon("someone_elses_coroutine", in_orbax=False)
    _abandon(read, in_orbax=False)  # the same name outside orbax: not dropped
    for err in (_closed_loop_error(), RuntimeError("something else")):  # done-callbacks' errors
      sys.unraisablehook(types.SimpleNamespace(
          object=None, exc_type=RuntimeError, exc_value=err, exc_traceback=None, err_msg=None))
  assert seen == ["someone_elses_coroutine", read, None]
  assert sys.unraisablehook is recorder
  _abandon(read)  # outside, after a restore that worked: not dropped
  assert seen[-1] == read
  with pytest.raises(ValueError):
    with _drop_abandoned_reads():
      raise ValueError("the restore failed")
  installed = sys.unraisablehook
  assert installed is not recorder
  with _drop_abandoned_reads():
    assert sys.unraisablehook is installed  # no second layer
  assert sys.unraisablehook is installed
  seen.clear()
  _abandon(read)
  _abandon("someone_elses_coroutine", in_orbax=False)
  assert seen == ["someone_elses_coroutine"]


def test_closed_loop_callbacks_of_abandoned_writes_are_dropped_and_nothing_else(monkeypatch):
  """After a failed save, TensorStore's threads hand finished writes to
  orbax's closed loop: those RuntimeErrors (raised in call_soon_threadsafe)
  are dropped from the first Checkpointer on; the same message raised
  elsewhere, and any other error, still reach the hook that was in place."""
  import threading

  from pe_spectral.training import checkpoint
  seen = []
  monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(str(u.exc_value)))
  monkeypatch.setattr(threading, "excepthook", lambda a: seen.append("thread " + str(a.exc_value)))
  checkpoint._drop_abandoned_writes()
  closed = _closed_loop_error()
  elsewhere = RuntimeError("Event loop is closed")  # raised by hand: no call_soon_threadsafe
  for exc in (closed, elsewhere, ValueError("a real one")):
    sys.unraisablehook(types.SimpleNamespace(object=None, exc_type=type(exc), exc_value=exc,
                                             exc_traceback=exc.__traceback__, err_msg=None))
    threading.excepthook(types.SimpleNamespace(exc_type=type(exc), exc_value=exc,
                                               exc_traceback=exc.__traceback__, thread=None))
  assert seen == ["Event loop is closed", "thread Event loop is closed",
                  "a real one", "thread a real one"]


def _smoke():
  from pe_spectral.training import config as configs
  return configs.build("smoke", "distance", "rope", steps=24)  # conftest.SWEEP_COMMON


def _run(wd, record_spectra=0, **hooks):  # in process, as the sweep CLI runs it on CPU
  return runner.run(_smoke(), [0, 1], wd,  # (seed groups of 1)
                    runner.RunOptions(eval_every=6, seed_group=1, record_spectra=record_spectra),
                    runner.Hooks(**hooks))


def test_stop_then_corrupt_then_resume_is_bit_exact(sweep_reference, tmp_path):
  """Stopped at step 12 (checkpoints 6 and 12 kept), step 12's data file cut short:
  the resume names both steps in one line, restarts from step 6, and ends
  where the uninterrupted sweep ended, bit for bit, with metrics and recorded
  spectra neither lost nor duplicated. With both kept checkpoints broken, one
  line says what to do."""
  with open(os.path.join(sweep_reference[0], "summary.json")) as f:
    reference = json.load(f)
  wd = str(tmp_path / "run")
  calls = []
  with pytest.raises(runner.Interrupted) as e:
    _run(wd, record_spectra=4, should_stop=lambda: calls.append(1) or len(calls) >= 2)
  assert e.value.step == 12
  assert not os.path.exists(os.path.join(wd, "summary.json"))
  # cut short, not a flipped byte: a flip can land on bytes that no array
  # reads (it then goes unnoticed, rightly; the FAULTS test covers flips), and
  # this test needs step 12 broken for certain
  with open(_largest_data_file(os.path.join(wd, "ckpt"), 12), "r+b") as f:
    f.truncate(64)

  both = str(tmp_path / "both-broken")
  shutil.copytree(wd, both)
  with open(os.path.join(both, "ckpt", "6", "meta", "metadata"), "w") as f:
    f.write("{")
  with pytest.raises(CheckpointError) as e:
    _run(both, record_spectra=4)
  msg = str(e.value)
  assert "no usable checkpoint" in msg and "resume=False" in msg and "\n" not in msg
  assert e.value.remedy is Remedy.START_OVER  # the sweep says: pass --noresume (test_sweep)
  caught = r"step 12: (checksum|unreadable|non-finite)"
  assert re.search(caught, msg) and "step 6: unreadable" in msg, msg

  os.makedirs(os.path.join(wd, "ckpt", "18.orbax-checkpoint-tmp-1764590000"))  # a cut-off save
  notes = []
  s = _run(wd, record_spectra=4, notify=notes.append)
  resumed = [n for n in notes if n.startswith("resuming")]
  assert len(resumed) == 1 and f"resuming {wd} from step 6 of 24" in resumed[0], notes
  assert re.search(caught, resumed[0]), notes
  assert "step 18: its save was cut off (removed)" in resumed[0], notes
  assert not [d for d in os.listdir(os.path.join(wd, "ckpt")) if "tmp" in d]
  assert s["test_accuracy"] == reference["test_accuracy"]
  assert s["train_accuracy"] == reference["train_accuracy"]
  for name in ("metrics.jsonl", "spectra.jsonl"):
    steps = [r["step"] for r in runner.read_jsonl(os.path.join(wd, name))]
    assert steps == [6, 12, 18, 24], name
  spectra = runner.read_jsonl(os.path.join(wd, "spectra.jsonl"))
  assert len(spectra[0]["contraction_ratio"]) == 2  # seeds
  assert os.path.exists(os.path.join(wd, "spectra.png"))
  # a finished run whose metrics are gone: one line, not an IndexError
  os.remove(os.path.join(wd, "metrics.jsonl"))
  os.remove(os.path.join(wd, "summary.json"))
  with pytest.raises(runner.BadFileError) as e:  # said before any training
    _run(wd, record_spectra=4)
  assert e.value.remedy is Remedy.START_OVER and "\n" not in str(e.value)
  assert "metrics.jsonl lacks the evaluation of step 24" in str(e.value)


def test_second_run_on_a_locked_workdir_is_refused(tmp_path):
  wd = str(tmp_path / "busy")
  os.makedirs(wd)
  with runner.workdir_lock(wd):
    with pytest.raises(runner.WorkdirBusyError) as e:
      _run(wd)
  assert f"pid {os.getpid()}" in str(e.value)
  assert not os.path.exists(os.path.join(wd, "config.json"))  # refused before writing
  # a holder that dies (SIGKILL) leaves no stale lock: the kernel drops it
  child = subprocess.Popen([sys.executable, "-c", (
      "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
      "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"),
      os.path.join(wd, ".lock")], stdout=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == "held"
  with pytest.raises(runner.WorkdirBusyError):
    with runner.workdir_lock(wd):
      pass
  child.kill()
  child.wait()
  with runner.workdir_lock(wd):  # free again
    fd = os.open(os.path.join(wd, ".lock"), os.O_RDWR)
    with pytest.raises(OSError):
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_lock_left_by_a_dead_run_is_taken_over_in_one_line(tmp_path, how):
  """A holder of workdir_lock that a signal ends (SIGTERM's default action, or
  kill -9) leaves its name in the lock; the next run takes the lock over and
  says so in one line naming the dead pid. A holder that ends normally, even
  by an exception, leaves no name, and the run after it says nothing."""
  wd = str(tmp_path / "left")
  os.makedirs(wd)
  child = subprocess.Popen([sys.executable, "-c", (
      "import sys, time\n"
      "from pe_spectral import workdir\n"
      "with workdir.workdir_lock(sys.argv[1]):\n"
      "  print('held', flush=True); time.sleep(60)\n"), wd], stdout=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == "held"
  child.send_signal(how)
  assert child.wait(timeout=60) == -how
  said = []
  with runner.workdir_lock(wd, said.append):
    pass
  host = os.uname().nodename
  assert said == [f"took over the lock of pid {child.pid} on {host}, which ended without "
                  "releasing it"]
  with pytest.raises(RuntimeError):
    with runner.workdir_lock(wd, said.append):
      raise RuntimeError("a run that fails still releases its lock")
  with runner.workdir_lock(wd, said.append):
    pass
  assert len(said) == 1 and open(os.path.join(wd, ".lock")).read() == ""


def test_metrics_rows_are_strict_json():
  row = {"step": 3, "test_loss": [float("nan"), 1.5, float("inf")], "elapsed": 2.0}
  clean = {k: runner.json_safe(v) for k, v in row.items()}
  text = json.dumps(clean, allow_nan=False)
  assert json.loads(text)["test_loss"] == [None, 1.5, None]


def test_lock_holder_reads_without_taking_or_changing_the_lock(tmp_path):
  from pe_spectral.training import workdir
  wd = str(tmp_path / "w")
  os.makedirs(wd)
  assert workdir.lock_holder(wd) is None  # no .lock yet: nothing is created
  assert not os.path.exists(os.path.join(wd, ".lock"))
  with workdir.workdir_lock(wd):
    child = subprocess.run([sys.executable, "-c", (
        "import sys; from pe_spectral import workdir; print(workdir.lock_holder(sys.argv[1]))"),
        wd], capture_output=True, text=True)
    assert child.stdout.strip() == f"pid {os.getpid()} on {os.uname().nodename}", child.stderr
  before = open(os.path.join(wd, ".lock"), "rb").read()
  assert workdir.lock_holder(wd) is None  # released
  assert open(os.path.join(wd, ".lock"), "rb").read() == before
  # the clean-up of cut-off saves names their steps and leaves finished ones
  ckpt = os.path.join(wd, "ckpt")
  for d in ("6", "12.orbax-checkpoint-tmp-1764590000", "18.orbax-checkpoint-tmp"):
    os.makedirs(os.path.join(ckpt, d))
  assert workdir.remove_unfinished_saves(ckpt) == ["12", "18"]
  assert os.listdir(ckpt) == ["6"]
  assert workdir.remove_unfinished_saves(str(tmp_path / "none")) == []


def test_eta_and_environment(tmp_path):
  """Each progress line's ETA is the steps left times this session's mean
  time per step over every chunk so far (its reported ``chunk_s``), not the
  last chunk's alone: one chunk slowed by a neighbour does not swing it."""
  seen = []
  summary = _run(str(tmp_path / "run"), progress=seen.append)
  # beside it, the summary names what produced the numbers
  env = json.load(open(tmp_path / "run" / "summary.json"))["environment"]
  assert env == summary["environment"]
  assert env["versions"]["jax"] == jax.__version__
  assert env["versions"]["numpy"] == np.__version__
  assert env["cpu"]["cores"] == os.cpu_count()
  if os.path.exists("/proc/cpuinfo"):
    assert env["cpu"]["avx512"] == ("avx512f" in open("/proc/cpuinfo").read().split())
  assert [p["step"] for p in seen] == [6, 12, 18, 24]
  for i, p in enumerate(seen):
    spent = sum(q["chunk_s"] for q in seen[:i + 1])
    want = (p["total"] - p["step"]) * spent / p["step"]
    assert abs(p["eta_s"] - want) <= 1e-9 * max(want, 1.0), (i, p, want)
  assert seen[-1]["eta_s"] == 0.0


def test_a_recorder_of_ones_own_gets_every_evaluation_and_is_cut_back_on_resume(tmp_path):
  """run(..., recorders=[...]): a new output (a TensorBoard writer, say) is one
  Recorder; the loop calls it after the built-in files at every evaluation,
  and on resume its file is cut back to the checkpoint like theirs."""
  class Accuracy(runner.JsonlRecorder):
    name = "accuracy"

    def row(self, ev):
      return {"step": ev.step, "first_step": ev.first_step,
              "mean": float(np.mean(ev.metrics["test_accuracy"])),
              "seeds": int(ev.losses.shape[0])}

  wd = str(tmp_path / "own")
  calls = []
  with pytest.raises(runner.Interrupted):
    runner.run(_smoke(), [0, 1], wd, runner.RunOptions(eval_every=6, seed_group=1),
               runner.Hooks(should_stop=lambda: calls.append(1) or len(calls) >= 2,
                            notify=lambda m: None), recorders=[Accuracy()])
  with open(os.path.join(wd, "accuracy.jsonl"), "a") as f:  # a row past the checkpoint
    f.write(json.dumps({"step": 18, "first_step": 12, "mean": -1.0, "seeds": 2}) + "\n")
  runner.run(_smoke(), [0, 1], wd, runner.RunOptions(eval_every=6, seed_group=1),
             runner.Hooks(notify=lambda m: None), recorders=[Accuracy()])
  rows = runner.read_jsonl(os.path.join(wd, "accuracy.jsonl"))
  metrics = runner.read_jsonl(os.path.join(wd, "metrics.jsonl"))
  assert [r["step"] for r in rows] == [m["step"] for m in metrics] == [6, 12, 18, 24]
  assert [r["first_step"] for r in rows] == [0, 6, 12, 18]
  for r, m in zip(rows, metrics):
    assert r["mean"] == float(np.mean(m["test_accuracy"])) and r["seeds"] == 2

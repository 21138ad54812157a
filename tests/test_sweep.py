"""End-to-end tests of ``python -m experiments.sweep`` (smoke preset, subprocesses)."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import jax
import pytest
from conftest import SWEEP_COMMON as COMMON
from conftest import run_cli_batch
from conftest import run_sweep as _sweep

from benchmarks.full_disk import sweep_filling_the_disk


def _summary(workdir):
  with open(os.path.join(workdir, "summary.json")) as f:
    return json.load(f)


@pytest.fixture
def reference(sweep_reference):
  return sweep_reference


def test_sweep_writes_workdir(reference):
  wd, out = reference
  for name in ("config.json", "metrics.jsonl", "summary.json", "accuracy.png", "ckpt"):
    assert os.path.exists(os.path.join(wd, name)), name
  s = _summary(wd)
  for key in ("pe", "task", "preset", "faithful", "seeds", "test_accuracy",
              "test_accuracy_mean", "test_accuracy_std", "train_accuracy", "steps",
              "wall_seconds"):
    assert key in s, key
  assert s["seeds"] == [0, 1] and s["steps"] == 24 and s["pe"] == "rope"
  assert len(s["test_accuracy"]) == 2
  with open(os.path.join(wd, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows] == [6, 12, 18, 24]
  assert all(len(r["test_accuracy"]) == 2 for r in rows)
  assert "test acc" in out.stderr and "ETA" in out.stderr  # progress on stderr
  assert "per-seed" in out.stdout  # final table on stdout


def test_sigkill_then_resume_equals_uninterrupted(reference, tmp_path):
  wd, _ = reference
  wd2 = str(tmp_path / "killed")
  # The sweep's own run, in a process that SIGKILLs itself right after step
  # 12's checkpoint save starts (the runner's on_checkpoint hook).
  kill = ("import os, signal, sys\n"
          "from pe_spectral import config, runner\n"
          "rc = config.build('smoke', 'distance', 'rope', steps=24)\n"
          "def die(step):\n"
          "  if step == 12: os.kill(os.getpid(), signal.SIGKILL)\n"
          "runner.run(rc, [0, 1], sys.argv[1], runner.RunOptions(eval_every=6, seed_group=1),\n"
          "           runner.Hooks(on_checkpoint=die))\n")
  out = subprocess.run([sys.executable, "-c", kill, wd2], capture_output=True, text=True)
  assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
  assert not os.path.exists(os.path.join(wd2, "summary.json"))
  out = _sweep(*COMMON, f"--workdir={wd2}")  # same command: resumes, and says so
  # the kill comes right after step 12's save started: resumed from 12, or
  # from 6 with step 12's cut-off save named
  assert (f"resuming {wd2} from step 12 of 24" in out.stderr
          or f"resuming {wd2} from step 6 of 24 (skipped: step 12: its save was cut off"
          in out.stderr), out.stderr[-2000:]
  with open(os.path.join(wd2, "metrics.jsonl")) as f:
    steps = [json.loads(line)["step"] for line in f]
  assert steps == [6, 12, 18, 24]  # no duplicated or lost evaluations
  a, b = _summary(wd2), _summary(wd)
  assert a["test_accuracy"] == b["test_accuracy"]
  assert a["train_accuracy"] == b["train_accuracy"]


def _background_sweep(wd, *, steps=None, eval_every=None, more=(), args=None, env=None):
  """A sweep running in the background, stderr piped (to signal), and the
  list its stderr lines are read into by a daemon thread: every wait on it is
  bounded, so a child that never exits fails the test, never hangs it. Its
  command line: ``args``, or a one-seed smoke run of ``steps`` and
  ``eval_every`` with ``more``."""
  if args is None:
    args = ["--preset=smoke", "--seeds=1", f"--steps={steps}", f"--eval_every={eval_every}",
            *more]
  proc = subprocess.Popen(
      [sys.executable, "-m", "experiments.sweep", *args, f"--workdir={wd}"],
      stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
      env=dict(os.environ, **(env or {})))
  lines = []
  reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
  reader.start()
  return proc, lines, reader


def _wait_for(lines, text, deadline):
  while not any(text in line for line in lines) and time.time() < deadline:
    time.sleep(0.05)


def test_ctrl_c_stops_at_a_checkpoint_with_one_line(tmp_path):
  """Ctrl-C finishes the current evaluation and its checkpoint, then exits 130
  with one line naming the step to resume from; no traceback."""
  wd = str(tmp_path / "ctrl-c")
  proc, lines, reader = _background_sweep(wd, steps=600, eval_every=6)
  try:
    _wait_for(lines, "step 6/600", time.time() + 300)
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    reader.join(timeout=10)
  finally:
    proc.kill()
  err = "".join(lines)
  assert rc == 130, err[-2000:]
  m = re.search(r"interrupted at step (\d+), checkpoint saved", err)
  assert m and "Traceback" not in err, err[-2000:]
  assert not os.path.exists(os.path.join(wd, "summary.json"))
  assert str(int(m.group(1))) in os.listdir(os.path.join(wd, "ckpt"))


def test_ctrl_c_while_the_program_starts_is_one_line(tmp_path):
  """A Ctrl-C during the imports (before any run's handler): exit 130 and one
  line, not an import's KeyboardInterrupt traceback; nothing written."""
  wd = str(tmp_path / "early")
  proc = subprocess.Popen(
      [sys.executable, "-m", "experiments.sweep", "--preset=smoke", "--seeds=1",
       f"--workdir={wd}"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
  time.sleep(0.5)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 130, err[-2000:]
  assert "interrupted while no run was training" in err and "Traceback" not in err, err[-2000:]
  assert not os.path.exists(wd)


def test_ctrl_c_answers_during_a_chunk_and_twice_stops_at_once(tmp_path):
  """The first Ctrl-C is answered while the chunk still runs (before the next
  progress line), saying when the run will stop; a second one stops at once --
  the process is gone within 1 s, mid-chunk (seconds of it left), where a
  normal exit waited for the chunk in flight -- keeping the last saved
  checkpoint. One call per interval (--preempt_grace=0)."""
  wd = str(tmp_path / "ctrl-c-twice")
  proc, lines, reader = _background_sweep(wd, steps=800, eval_every=400,
                                          more=["--preempt_grace=0"])
  try:
    deadline = time.time() + 300
    _wait_for(lines, "step 400/800", deadline)
    proc.send_signal(signal.SIGINT)
    _wait_for(lines, "Ctrl-C: stopping", deadline)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    exit_s = time.time() - sent
    reader.join(timeout=10)
  finally:
    proc.kill()
  err = "".join(lines)
  assert rc == 130, err[-2000:]
  first = next(line for line in lines if "Ctrl-C: stopping" in line)
  m = re.search(r"in about (\d+) s", first)
  assert m, first  # when, from the measured chunk
  # the chunk had seconds left when the second press came; the exit did not wait
  assert exit_s < 1.0, (exit_s, first)
  assert "step 800/800" not in err, err[-2000:]  # neither press waited for the chunk
  assert "interrupted: rerun the same command" in err and "Traceback" not in err
  assert not os.path.exists(os.path.join(wd, "summary.json"))
  assert "400" in os.listdir(os.path.join(wd, "ckpt"))


def _signalled_sweep(wd, args, *, after, signum=signal.SIGTERM, env=None):
  """A sweep with ``args``, sent ``signum`` once its stderr shows ``after``:
  ``(returncode, seconds from the signal to the exit, stderr)``."""
  proc, lines, reader = _background_sweep(wd, args=args, env=env)
  try:
    _wait_for(lines, after, time.time() + 300)
    sent = time.time()
    proc.send_signal(signum)
    rc = proc.wait(timeout=120)
    exit_s = time.time() - sent
    reader.join(timeout=10)
  finally:
    proc.kill()
  return rc, exit_s, "".join(lines)


def test_a_sigterm_during_a_first_call_exits_within_the_grace(tmp_path):
  """SIGTERM while a session's first call compiles or runs (its pace unknown,
  so one call of a whole 1,500-step interval), with a 1 s grace: the process
  exits before the grace ends -- where it waited for the call, whatever the
  grace -- preempted (143), with a line saying that no checkpoint was saved yet."""
  wd = str(tmp_path / "grace")
  rc, exit_s, err = _signalled_sweep(
      wd, ["--preset=smoke", "--seeds=1", "--steps=3000", "--eval_every=1500",
           "--preempt_grace=1"],
      after="generating data and compiling")
  assert rc == 143, err[-2000:]
  assert exit_s < 2.0, (exit_s, err[-1000:])
  assert "stopped now with the last saved checkpoint (none yet)" in err, err[-2000:]
  assert "step 1500/3000" not in err and "Traceback" not in err
  assert not os.path.exists(os.path.join(wd, "summary.json"))


@pytest.mark.long
def test_a_sigterm_mid_interval_saves_there_within_the_grace_and_resumes_bit_identical(
    tmp_path):
  """With a 3 s grace a 512-step interval runs as calls of at most 1 s
  (the first call's pace; a power of two: no remainder), and a SIGTERM mid-interval (the third: the
  calls' programs compiled in the second) saves after the call in flight, with
  the interval's losses so far: the process exits within the grace at a step
  between evaluations, and the same command finishes the run equal, row for
  row and bit for bit, to an uninterrupted one (whose calls were sized by its
  own pace). Under the tests' XLA flags together (conftest.py: -O0 and the
  older fusion emitter) a 25-step call and a 200-step one differ in the last
  bits; at the default flags (users' runs) and at -O0 alone they agree (one
  seed, 600 smoke steps, split 200/25/24/176 ways): this test runs at the default.
  The grace leaves the save after the call ~1.2 s (the watchdog fires 0.75 s
  before the grace ends): a 1.5 s grace left 0.6 s, which a save on a 2-core
  machine busy with the suite's other worker once overran (the watchdog then
  stopped the process with the started save, a correct exit but not this test's
  case); calls stay shorter than the interval up to ~1,000 steps/s."""
  args = ["--preset=smoke", "--seeds=1", "--steps=1536", "--eval_every=512",
          "--preempt_grace=3"]
  env = {"XLA_FLAGS": ""}
  whole, cut = str(tmp_path / "whole"), str(tmp_path / "cut")
  _sweep(*args, f"--workdir={whole}", env=env)
  rc, exit_s, err = _signalled_sweep(cut, args, after="step 1024/1536", env=env)
  assert rc == 143, err[-2000:]
  assert exit_s < 3, (exit_s, err[-1000:])
  assert "within 3 s (--preempt_grace)" in err, err[-2000:]
  m = re.search(r"preempted at step (\d+): saved", err)
  assert m and int(m.group(1)) % 512 and "Traceback" not in err, err[-2000:]
  assert m.group(1) in os.listdir(os.path.join(cut, "ckpt"))
  out = _sweep(*args, f"--workdir={cut}", env=env)
  assert f"from step {m.group(1)} of 1536" in out.stderr, out.stderr[-2000:]
  rows = lambda d, n: [{k: v for k, v in json.loads(line).items() if k != "elapsed"}
                       for line in open(os.path.join(d, n))]
  for name in ("metrics.jsonl", "steps.jsonl"):
    assert rows(cut, name) == rows(whole, name), name
  assert _summary(cut)["test_accuracy"] == _summary(whole)["test_accuracy"]


def test_the_watchdogs_line_names_the_newest_finished_save(tmp_path):
  """When the grace runs out, the line says which checkpoint a resume starts
  from: the newest folder orbax finished (renamed to its step), and a save
  that had started but not finished (its temporary folder) is named as such."""
  from experiments import sweep
  ckpt = tmp_path / "ckpt"
  stop = sweep._Stop(grace=1.5, ckpt_dir=str(ckpt))
  assert stop.kept() == "none yet"  # no folder at all yet
  ckpt.mkdir()
  (ckpt / "512").mkdir()
  assert stop.kept() == "step 512"
  stop.checkpoint_started(576)
  (ckpt / "576.orbax-checkpoint-tmp-1").mkdir()
  assert stop.kept() == "step 512; the save of step 576 had not finished"
  (ckpt / "576.orbax-checkpoint-tmp-1").rename(ckpt / "576")
  assert stop.kept() == "step 576"


@pytest.mark.long
def test_an_analysis_beside_a_training_run_reads_a_complete_checkpoint_and_says_which(
    tmp_path):
  """decompose, three times, while a sweep saves a checkpoint every 20 steps
  and deletes the older ones (keep-last-2): each reads a complete checkpoint
  (an evaluation's step; a half-written save is never listed), says which
  step in one line and that the run is still training, and changes nothing
  of the run (a read-only checkpoint manager)."""
  wd = str(tmp_path / "training")
  proc, lines, reader = _background_sweep(wd, steps=100000, eval_every=20)
  try:
    _wait_for(lines, "step 40/100000", time.time() + 300)
    outs = run_cli_batch("experiments.decompose", [([f"--workdir={wd}"], tmp_path)] * 3)
    assert proc.poll() is None, "".join(lines)[-2000:]  # still training throughout
  finally:
    proc.kill()
    proc.wait()
  steps = []
  for out in outs:
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if "analysing the checkpoint of step" in line]
    assert len(said) == 1 and "the run is still training" in said[0], out.stderr[-2000:]
    steps.append(int(re.search(r"checkpoint of step (\d+) of 100000", said[0]).group(1)))
  assert all(s % 20 == 0 and s >= 40 for s in steps), steps


@pytest.mark.long
def test_a_short_fault_soak_ends_bit_identical_to_the_uninterrupted_run(reference, tmp_path):
  """benchmarks/faults.py's soak, short: a kill while a checkpoint is written,
  a Ctrl-C mid-run and a SIGTERM during start-up, each followed by the same
  command; the run then equals the session's uninterrupted sweep in every
  metrics and steps row, TensorBoard scalar, checkpoint array and summary
  accuracy, each row once (the benchmark runs 50 drawn faults)."""
  from benchmarks import faults
  lines = []
  report = faults.soak(str(tmp_path), [("kill-in-save", 0.0, 0.0), ("SIGINT", 0.4, 0.0),
                                       ("SIGTERM", 0.0, 0.5)],
                       reference=reference[0], faults_per_run=3, log=lines.append)
  assert report["faults"] == 3 and report["runs"] == 1, lines
  assert report["differences"] == [] and report["unexpected"] == [], report
  assert "3 faults injected at these steps" in lines[-1] and "0 differences" in lines[-1]


def test_finished_run_is_not_retrained(reference):
  wd, _ = reference
  before = _summary(wd)
  names = ("config.json", "summary.json", "metrics.jsonl", "steps.jsonl", "accuracy.png")
  files = {n: (open(os.path.join(wd, n), "rb").read(), os.stat(os.path.join(wd, n)).st_mtime_ns)
           for n in names}
  out = _sweep(*COMMON, f"--workdir={wd}")
  for n in names:  # no file rewritten, not even with the same bytes
    assert (open(os.path.join(wd, n), "rb").read(),
            os.stat(os.path.join(wd, n)).st_mtime_ns) == files[n], n
  assert "step 6/24" not in out.stderr and "step 24/24" not in out.stderr
  assert "already finished" in out.stderr and "compiling" not in out.stderr
  assert "nothing was changed" in out.stderr and "summary.json" in out.stderr
  assert _summary(wd)["test_accuracy"] == before["test_accuracy"]


def test_checkpoints_without_config_are_refused(reference, tmp_path):
  """A workdir whose config.json is gone cannot be resumed under a config that
  cannot be verified, and the refusal rewrites nothing."""
  import shutil
  wd_ref, _ = reference
  wd = str(tmp_path / "noconfig")
  shutil.copytree(wd_ref, wd)
  os.remove(os.path.join(wd, "config.json"))
  out = _sweep(*COMMON, "--learning_rate=3e-3", f"--workdir={wd}", check=False)
  assert out.returncode == 1 and "no config.json" in out.stderr, out.stderr[-2000:]
  # the library's remedy, in the program's flags
  assert "pass --noresume to start it over or choose another --workdir" in out.stderr
  assert "resume=False" not in out.stderr
  assert not os.path.exists(os.path.join(wd, "config.json"))  # nothing rewritten


def test_changed_config_in_same_workdir_is_refused(reference):
  wd, _ = reference
  out = _sweep("--preset=smoke", "--seeds=3", "--steps=24", f"--workdir={wd}",
               check=False)
  assert out.returncode != 0 and "different settings" in out.stderr
  assert "pass --noresume" in out.stderr
  # refused before any data is generated, and only that is said
  assert "generating data" not in out.stderr and "already finished" not in out.stderr


def test_nonfinite_loss_stops_with_message(tmp_path):
  wd = str(tmp_path / "nan")
  out = _sweep("--preset=smoke", "--seeds=1", "--steps=30", "--eval_every=5",
               "--learning_rate=1e30", f"--workdir={wd}", check=False)
  assert out.returncode == 1
  assert "non-finite loss" in out.stderr
  assert not os.path.exists(os.path.join(wd, "summary.json"))


def test_nonfinite_state_is_never_checkpointed(tmp_path, monkeypatch):
  """Losses are measured before each update, so the last update of a chunk can
  break the state while every loss is finite. Such a state must not be saved,
  and the message must name the real last good step."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from pe_spectral.training import config as configs
  from pe_spectral.training import runner, train
  from pe_spectral.training.checkpoint import Checkpointer

  original = train.jit_chunk

  def poisoned_program(when):
    """``train.jit_chunk`` whose chunk NaNs the parameters once ``when(step)``."""
    def program(steps):
      chunk = original(steps)

      def call(states, *args, **kw):
        states, losses = chunk(states, *args, **kw)
        if when(int(np.asarray(states["step"])[0])):
          states = dict(states, params=jax.tree.map(lambda x: x * jnp.nan, states["params"]))
        return states, losses
      return call
    return program

  # the update ending step 3 blows up
  monkeypatch.setattr(train, "jit_chunk", poisoned_program(lambda step: step >= 3))
  rc = configs.build("smoke", "distance", "rope", steps=6)
  wd = str(tmp_path / "poison")
  try:
    runner.run(rc, [0, 1], wd, runner.RunOptions(eval_every=1))
    raise AssertionError("a non-finite state was not detected")
  except runner.NonFiniteLossError as e:
    msg = str(e)
  assert "between steps 2 and 3" in msg and "last good checkpoint (step 2)" in msg, msg
  steps = train.make_steps(rc.model, rc.task, rc.train, rc.task.num_train)
  ckpt = Checkpointer(os.path.join(wd, "ckpt"))
  try:
    assert ckpt.latest_step() == 2
    states, _ = ckpt.restore(2, steps.abstract_state(2))
  finally:
    ckpt.close()
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(states["params"]))
  # diverging before the first evaluation: no checkpoint, and the message says so
  wd2 = str(tmp_path / "poison-early")
  monkeypatch.setattr(train, "jit_chunk", poisoned_program(lambda step: True))
  try:
    runner.run(rc, [0, 1], wd2, runner.RunOptions(eval_every=3))
    raise AssertionError("a non-finite state was not detected")
  except runner.NonFiniteLossError as e:
    assert "No checkpoint was saved" in str(e), str(e)


BAD_FLAGS = [
    (["--pe=rotary"], "unknown --pe 'rotary'"),
    (["--seeds=0"], "--seeds must be >= 1"),
    (["--pe=partial_rope", "--rope_heads=9"], "rope_heads"),
    (["--pe=partial_rope", "--rope_heads=-1"], "rope_heads"),
    (["--steps=0"], "--steps must be >= 1"),
    (["--learning_rate=nan"], "--learning_rate must be a finite number > 0"),
    (["--learning_rate=inf"], "--learning_rate must be a finite number > 0"),
    (["--rope_heads=1"], "only applies to --pe=partial_rope"),
    (["--record_spectra=-1"], "--record_spectra must be >= 0"),
    (["--seeds=4", "--seed_group=3"], "must divide --seeds"),
    (["--seed_group=-1"], "--seed_group must be >= 0"),
    (["--seed_group=half"], "--seed_group must be an int >= 0 or auto"),
    (["--attention_block=0"], "attention_block must be an int >= 1"),
    (["--attention_impl=xla"], "has no dropout on the attention probabilities"),
    (["--pe=cope", "--attention_impl=cudnn", "--config.model.dropout=0"],
     "cannot run pe='cope'"),
    (["--memory_gib=0"], "--memory_gib must be > 0"),
    (["--preempt_grace=-1"], "--preempt_grace must be >= 0 seconds"),
    (["--memory_fraction=0"], "--memory_fraction must be in (0, 1]"),
    (["--memory_fraction=1.5"], "--memory_fraction must be in (0, 1]"),
    (["--dtype=float16"], "value should be one of"),
    (["--config.model.d_ff=abc"], "--config.model.d_ff takes an int, got 'abc'"),
    (["--config.model.pe=nope"], "--config.model.pe cannot be set: use --pe"),
    (["--config.model.d_model=15"], "must be divisible by num_heads"),
    (["--config.model.nosuch=1"], "Unknown command line flag 'config.model.nosuch'"),
    (["--pe=rope", "--alibi_slopes=paper"], "only applies to --pe=alibi"),
    (["--config.model.pe_options.gamma=0.3"], "pe='rope' has no options"),
    (["--pe=xpos", "--config.model.pe_options.gamma=-1"], "gamma must be a finite number > 0"),
    (["--pe=partial_rope", "--config.model.pe_options.heads=2"], "use --rope_heads"),
    (["--workdir=/proc/forbidden/run"], "not writable"),
    ([f"--workdir={os.path.abspath(__file__)}/run"], "not writable"),
    # absl's own usage errors exit 2 as well (experiments.cli)
    (["--task=bogus"], "value should be one of"),
    (["--nosuchflag"], "Unknown command line flag"),
    (["stray"], "unexpected arguments"),
]


@pytest.fixture(scope="module")
def bad_flag_runs(tmp_path_factory):
  """Every BAD_FLAGS command line, each in its own empty folder, run in one
  process (conftest.run_cli_batch): ``[(cwd, CompletedProcess)]``."""
  root = tmp_path_factory.mktemp("bad_flags")
  cwds = [root / str(i) for i in range(len(BAD_FLAGS))]
  for cwd in cwds:
    cwd.mkdir()
  outs = run_cli_batch("experiments.sweep", [(["--preset=smoke", *args], cwd)
                                             for (args, _), cwd in zip(BAD_FLAGS, cwds)])
  return list(zip(cwds, outs))


@pytest.mark.parametrize("case", range(len(BAD_FLAGS)),
                         ids=[" ".join(args) for args, _ in BAD_FLAGS])
def test_bad_flags_fail_cleanly(case, bad_flag_runs):
  msg = BAD_FLAGS[case][1]
  cwd, out = bad_flag_runs[case]
  assert out.returncode == 2, (out.returncode, out.stderr[-1000:])
  assert msg in out.stderr, out.stderr[-1000:]
  assert "Traceback" not in out.stderr
  assert not os.path.exists(cwd / "runs")  # nothing half-written


def test_help_exits_0():
  out = subprocess.run([sys.executable, "-m", "experiments.sweep", "--help"],
                       capture_output=True, text=True)
  assert out.returncode == 0 and "--pe" in out.stdout + out.stderr


def test_each_shortcut_flag_names_the_config_field_it_sets():
  """One spelling per setting: a shortcut flag's help says which --config
  field it sets, and that field, set through a RunSpec as --config.* sets it,
  takes the value the shortcut would give it."""
  from experiments import sweep
  from pe_spectral.training import config as configs
  said = {}
  for name in sweep.FLAGS:
    m = re.search(r"Sets --config\.([\w.]+)\.", sweep.FLAGS[name].help or "")
    if m:
      said[name] = m.group(1)
  assert {"rope_heads", "alibi_slopes", "steps", "epochs", "batch_size", "learning_rate",
          "data", "data_seed", "random_positions"} <= set(said)
  values = {"model.pe_options.heads": ("partial_rope", 2), "model.pe_options.slopes":
            ("alibi", "paper"), "model.random_positions": ("rope", 256),
            "task.corpus": ("rope", os.path.dirname(json.__file__)), "task.data_seed": ("rope", 3),
            "train.epochs": ("rope", 3), "train.steps": ("rope", 7),
            "train.batch_size": ("rope", 16), "train.learning_rate": ("rope", 0.01)}
  for flag, field in said.items():
    pe, value = values[field]
    task = "lm" if field == "task.corpus" else "distance"
    rc = configs.RunSpec.of(task, pe, preset="smoke", settings={field: value}).build()
    got = rc
    for part in field.split("."):
      got = getattr(got, part)
    assert got == value, (flag, field, got)


def test_any_config_field_from_the_command_line(tmp_path):
  """--config.<section>.<field> reaches config.json and the default workdir's
  name (as does --steps: a run trained for other steps is another run); a
  resume with another value is refused, naming the field."""
  _sweep("--preset=smoke", "--seeds=1", "--steps=2", "--eval_every=2",
         "--config.model.d_ff=48", "--config.train.b2=0.99",
         "--config.task.max_len=22", cwd=tmp_path)
  wd = tmp_path / "runs" / "distance" / "rope-smoke-d_ff48-task.max_len22-b20.99-steps2"
  with open(wd / "config.json") as f:
    run = json.load(f)["run"]
  assert (run["model"]["d_ff"], run["train"]["b2"], run["task"]["max_len"]) == (48, 0.99, 22)
  again = _sweep("--preset=smoke", "--seeds=1", "--steps=2", "--eval_every=2",
                 "--config.model.d_ff=40", f"--workdir={wd}", check=False)
  assert again.returncode != 0 and "run.model.d_ff: 48 -> 40" in again.stderr, again.stderr


def test_config_fields_added_later_with_none_default_still_match():
  from pe_spectral.training import runner
  old = {"run": {"model": {"pe": "alibi", "d_model": 64}}, "seeds": [0]}
  new = {"run": {"model": {"pe": "alibi", "d_model": 64, "random_positions": None}},
         "seeds": [0]}
  assert runner.config_diff(old, new) == []
  changed = {"run": {"model": {"pe": "alibi", "d_model": 64, "random_positions": 96}},
             "seeds": [0]}
  assert runner.config_diff(old, changed) == ["run.model.random_positions: None -> 96"]


def test_seed_group_default_follows_backend():
  from experiments import sweep
  assert sweep.resolve_seed_group(None) == (1 if jax.default_backend() == "cpu" else "auto")
  assert sweep.resolve_seed_group(0) is None  # one vmap over all seeds
  assert sweep.resolve_seed_group(2) == 2
  assert sweep.resolve_seed_group("2") == 2 and sweep.resolve_seed_group("AUTO") == "auto"


def test_auto_seed_group_sizes_to_the_share_given_on_the_command_line(tmp_path):
  """--memory_fraction reaches the training's seed-group choice: a share that
  nothing fits leaves one seed at a time, said so with the share."""
  out = _sweep("--preset=smoke", "--seeds=2", "--steps=2", "--eval_every=2",
               "--seed_group=auto", "--memory_fraction=1e-15",
               f"--workdir={tmp_path / 'run'}")
  assert "seed group auto: even one seed at a time needs" in out.stderr, out.stderr[-2000:]
  assert "memory_fraction=1e-15" in out.stderr
  assert os.path.exists(tmp_path / "run" / "summary.json")


@pytest.mark.long
def test_sigterm_saves_and_the_resume_equals_an_uninterrupted_run(reference, tmp_path):
  """A scheduler's preemption notice: SIGTERM while the first chunk compiles
  and runs. The sweep finishes that chunk, saves its step, releases the lock,
  says so in one line and exits 143 (128 + SIGTERM); the same command then
  resumes and ends bit for bit where the uninterrupted reference run did."""
  from pe_spectral.training import workdir as workdir_lib
  wd = str(tmp_path / "preempted")
  proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep", *COMMON,
                           f"--workdir={wd}"],
                          stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
  lines = []
  reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
  reader.start()
  try:
    _wait_for(lines, "generating data and compiling", time.time() + 300)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=300)
    reader.join(timeout=10)
  finally:
    proc.kill()
  err = "".join(lines)
  assert rc == 143, err[-2000:]
  m = re.search(r"preempted at step (\d+): saved; rerun the same command to resume", err)
  assert m and "Traceback" not in err and "SIGTERM: saving" in err, err[-2000:]
  step = int(m.group(1))
  assert 6 <= step < 24 and str(step) in os.listdir(os.path.join(wd, "ckpt"))
  assert not any("tmp" in d for d in os.listdir(os.path.join(wd, "ckpt")))
  assert workdir_lib.lock_holder(wd) is None  # released, not merely left behind
  out = _sweep(*COMMON, f"--workdir={wd}")
  assert f"from step {step} of 24" in out.stderr, out.stderr[-2000:]
  rows = lambda d: [{k: v for k, v in json.loads(line).items() if k != "elapsed"}
                    for line in open(os.path.join(d, "metrics.jsonl"))]
  assert rows(wd) == rows(reference[0])  # every evaluation, every seed, exactly
  assert _summary(wd)["test_accuracy"] == _summary(reference[0])["test_accuracy"]


@pytest.fixture
def small_disk(tmp_path):
  """A 700 KiB tmpfs (room for the smoke sweep's first two checkpoints, not a
  third), remounted larger by calling it with a size; skipped where this
  process cannot mount one (not root, or no tmpfs)."""
  mnt = tmp_path / "small"
  mnt.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(mnt)],
                    capture_output=True).returncode != 0:
    pytest.skip("cannot mount a tmpfs here")

  def grow(size):
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)
  try:
    yield mnt, grow
  finally:
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _sweep_filling_the_disk(mnt, where, step, left, *args):
  """The sweep with its disk made full at one chosen moment (benchmarks/full_disk.py)."""
  return sweep_filling_the_disk(str(mnt), where, step, left, *args)


def _one_error_line_and_no_traceback(out) -> str:
  assert out.returncode == 1, out.stderr[-3000:]
  errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
  # no traceback: not orbax's, absl's or asyncio's, nor the "Event loop is
  # closed" of TensorStore writes that finish after orbax's loop has closed
  assert len(errors) == 1, out.stderr[-3000:]
  for noise in ("Traceback", "Exception ignored", "Event loop is closed"):
    assert noise not in out.stderr, out.stderr[-3000:]
  return errors[0]


@pytest.mark.long
def test_a_full_disk_is_one_line_and_the_resume_equals_an_uninterrupted_run(reference,
                                                                             small_disk):
  """A checkpoint that does not fit: the sweep says so in one line (where,
  what it needs, what is free) and exits 1, without a traceback. Here the
  free-space check before the save is made to pass and the disk fills right
  before the save of step 18, so the write itself runs out of space mid-save
  (the harder case); the run after space is freed removes the cut-off save
  and ends bit for bit as the uninterrupted run."""
  mnt, grow = small_disk
  grow("8m")  # room for every other file: only the checkpoint's write meets a full disk
  wd = str(mnt / "run")
  out, filler = _sweep_filling_the_disk(mnt, "checkpoint", 18, 64 * 1024, *COMMON,
                                        f"--workdir={wd}")
  error = _one_error_line_and_no_traceback(out)
  assert re.search(r"no space for the checkpoint of step 18 in .*/ckpt: its write ran out "
                   r"of space; .* MiB is free; free some space", error), error
  assert any(d.endswith("orbax-checkpoint-tmp") for d in os.listdir(os.path.join(wd, "ckpt")))
  os.remove(filler)
  again = _sweep(*COMMON, f"--workdir={wd}")
  assert "cut off" in again.stderr, again.stderr[-2000:]  # the cut-off save, named and removed
  assert not any(d.endswith("tmp") for d in os.listdir(os.path.join(wd, "ckpt")))
  rows = lambda d: [{k: v for k, v in json.loads(line).items() if k != "elapsed"}
                    for line in open(os.path.join(d, "metrics.jsonl"))]
  assert rows(wd) == rows(reference[0])


@pytest.mark.long
def test_a_disk_full_before_the_checkpoint_is_one_line_and_resumes(reference, small_disk):
  """The other files' case: the disk is full (not one page left) when the
  first metrics row is written, before any checkpoint. One line naming the
  file and the free space, exit 1; the run after space is freed starts over
  and ends bit for bit as the uninterrupted run."""
  mnt, grow = small_disk
  grow("8m")
  wd = str(mnt / "run")
  out, filler = _sweep_filling_the_disk(mnt, "metrics", 6, 0, *COMMON, f"--workdir={wd}")
  error = _one_error_line_and_no_traceback(out)
  assert re.search(r"no space left writing .*/metrics\.jsonl \(0\.0 MiB free\); free some "
                   r"space, then rerun the same command to resume", error), error
  os.remove(filler)
  again = _sweep(*COMMON, f"--workdir={wd}")
  assert "step 24/24" in again.stderr, again.stderr[-2000:]
  rows = lambda d: [{k: v for k, v in json.loads(line).items() if k != "elapsed"}
                    for line in open(os.path.join(d, "metrics.jsonl"))]
  assert rows(wd) == rows(reference[0])


def test_a_checkpoint_that_cannot_fit_is_refused_before_writing(small_disk):
  """The cheap check before each save: a state larger than the free space
  raises DiskFullError at once, naming the bytes needed and free, and writes
  nothing."""
  import numpy as np

  from pe_spectral.training import checkpoint
  mnt, _ = small_disk
  with checkpoint.Checkpointer(str(mnt / "ckpt")) as ckpt:
    state = {"w": np.zeros((2**20 // 4,), np.float32)}  # 1 MiB
    with pytest.raises(checkpoint.DiskFullError, match=r"step 3 in .*: it needs about 1\.1 "
                                                        r"MiB, and 0\.\d MiB is free"):
      ckpt.save(3, state, {"step": 3})
    assert os.listdir(mnt / "ckpt") == []


def test_compile_cache_folder_follows_flag_then_environment():
  """--compile_cache wins, then JAX's own variable, then ours, then the XDG
  cache folder; an off value (flag or variable) turns the cache off."""
  from experiments.cli import compile_cache_dir
  home = os.path.expanduser("~")
  assert compile_cache_dir(None, {}) == os.path.join(home, ".cache", "pe-spectral", "jax")
  assert compile_cache_dir(None, {"XDG_CACHE_HOME": "/x"}) == "/x/pe-spectral/jax"
  env = {"PE_SPECTRAL_COMPILE_CACHE": "/ours", "XDG_CACHE_HOME": "/x"}
  assert compile_cache_dir(None, env) == "/ours"
  assert compile_cache_dir(None, dict(env, JAX_COMPILATION_CACHE_DIR="/jax")) == "/jax"
  assert compile_cache_dir("~/c", dict(env, JAX_COMPILATION_CACHE_DIR="/jax")) == home + "/c"
  for off in ("off", "0", "none", ""):
    assert compile_cache_dir(off, env) is None
    assert compile_cache_dir(None, {"PE_SPECTRAL_COMPILE_CACHE": off}) is None


def test_a_sweep_fills_the_compile_cache_it_is_given(tmp_path):
  """A real sweep writes its compiled programs (training chunk and evaluation)
  to --compile_cache's folder. JAX stores only programs that took at least
  its minimum compile time, which the suite sets to 0.5 s: on a fast machine
  the smoke evaluation compiles in less, so here the minimum is 0."""
  cache = tmp_path / "cache"
  _sweep("--preset=smoke", "--seeds=1", "--steps=6", "--eval_every=6",
         f"--workdir={tmp_path / 'run'}", f"--compile_cache={cache}",
         env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
  assert cache.is_dir() and len(os.listdir(cache)) >= 2, os.listdir(cache)

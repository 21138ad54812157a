r"""Fault-injection soak: a small sweep interrupted again and again at points drawn
from a seeded random generator, each fault followed by the same command, until
the run finishes; then compared with one uninterrupted run of that command.

  python -m benchmarks.faults --faults=50          # the row in benchmarks/README.md
  python -m benchmarks.faults --faults=4 --seed=1  # a short one

The faults: SIGKILL, SIGTERM (a scheduler's preemption), SIGINT (one Ctrl-C),
and a SIGKILL the moment a progress line appears, which is while that
evaluation's checkpoint is being written (its save is asynchronous and starts
just before the line; whether the kill cut a save is counted). Each lands after
a drawn share of the evaluations the attempt has left (none: during start-up
and compilation) plus a drawn delay; one that comes after the process ended
(it finished first) is not counted and is tried once more in the next attempt. A run
takes faults until ``--faults_per_run`` or until it finishes on its own; then
a fresh workdir takes the next ones.

Compared with the uninterrupted run, bit for bit: every ``metrics.jsonl`` and
``steps.jsonl`` row (all but the wall time), every TensorBoard scalar of every
writer (step and value, as TensorBoard reads them, orphans purged), the final
checkpoint's arrays and the summary's accuracies; and each evaluation's row must
be there exactly once. Prints ``N faults injected at these steps, M resumes,
D differences``. Writes ``--out`` (JSON). Never part of the suite's timing; its
short form (3 faults) is tests/test_sweep.py's soak test.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

import numpy as np

KINDS = ("SIGKILL", "SIGTERM", "SIGINT", "kill-in-save")
# the run every fault lands in: 2 seeds, 4 evaluations (tests/conftest.py's reference)
ARGS = ["--preset=smoke", "--seeds=2", "--steps=24", "--eval_every=6"]


def sweep_command(workdir: str, args=ARGS) -> list:
  return [sys.executable, "-m", "experiments.sweep", *args, f"--workdir={workdir}"]


def draw_faults(n: int, seed: int) -> list:
  """``n`` faults ``(kind, where, delay s)`` from ``seed``: ``where`` in [0, 1)
  places the fault among the evaluations the attempt has left (0: during
  start-up), so that it lands whatever checkpoint the attempt resumed from."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    kind = KINDS[int(rng.integers(len(KINDS)))]
    delay = 0.0 if kind == "kill-in-save" else float(rng.uniform(0.0, 0.05))
    out.append((kind, float(rng.uniform(0.0, 1.0)), delay))
  return out


def _evaluations_left(workdir: str, args) -> int:
  """Evaluations an attempt has before it finishes: from the newest kept
  checkpoint (a step directory) to the end."""
  value = lambda name: int(next(a.split("=")[1] for a in args if a.startswith(f"--{name}=")))
  total, every = value("steps"), value("eval_every")
  ckpt = os.path.join(workdir, "ckpt")
  done = max([int(d) for d in os.listdir(ckpt) if d.isdigit()], default=0) \
      if os.path.isdir(ckpt) else 0
  return -(-(total - done) // every)


def attempt(cmd, workdir: str, fault: Optional[tuple], timeout: float = 600) -> dict:
  """Runs ``cmd`` once; with ``fault``, sends it. Returns what happened:
  ``{"returncode", "injected", "kind", "at_step", "cut_save", "stderr"}``, and
  ``exit_s`` (seconds from the signal to the exit) when it was sent."""
  proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
  lines = []
  reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
  reader.start()
  got = {"injected": False, "kind": None, "at_step": None, "cut_save": None}
  try:
    if fault is not None:
      kind, after, delay = fault  # after: this attempt's evaluations before it
      progress = lambda: [ln for ln in lines if "] step " in ln and "/" in ln]
      mark = "generating data and compiling" if after == 0 else None
      deadline = time.time() + timeout
      while proc.poll() is None and time.time() < deadline:
        if (mark and any(mark in ln for ln in lines)) or (not mark and len(progress()) >= after):
          break
        time.sleep(0.002)
      if proc.poll() is None:
        time.sleep(delay)
        if proc.poll() is None:
          done = progress()
          got.update(injected=True, kind=kind, at_step=(
              int(done[-1].split("] step ")[1].split("/")[0]) if done else 0))
          sent = time.time()
          proc.send_signal({"SIGKILL": signal.SIGKILL, "kill-in-save": signal.SIGKILL,
                            "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}[kind])
          if kind == "kill-in-save":
            ckpt = os.path.join(workdir, "ckpt")
            proc.wait()
            got["cut_save"] = os.path.isdir(ckpt) and any(
                "tmp" in d for d in os.listdir(ckpt))
    proc.wait(timeout=timeout)
    if got["injected"]:
      got["exit_s"] = round(time.time() - sent, 2)  # from the signal to the exit
    reader.join(timeout=10)
  finally:
    proc.kill()
  got.update(returncode=proc.returncode, stderr="".join(lines))
  return got


def _rows(path: str) -> list:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [{k: v for k, v in json.loads(line).items() if k != "elapsed"} for line in f]


def compare(workdir: str, reference: str) -> list[str]:
  """The differences of a finished ``workdir`` from ``reference`` (empty: none)."""
  diffs = []
  for name in ("metrics.jsonl", "steps.jsonl"):
    a, b = _rows(os.path.join(workdir, name)), _rows(os.path.join(reference, name))
    steps = [r["step"] for r in a]
    if len(set(steps)) != len(steps):
      diffs.append(f"{name}: a step's row more than once ({steps})")
    if a != b:
      diffs.append(f"{name}: rows differ")
  from pe_spectral.training import events
  tb_a, tb_b = (os.path.join(d, events.SUBDIR) for d in (workdir, reference))
  if os.path.isdir(tb_b):
    for writer in sorted(os.listdir(tb_b)):
      if (events.read_scalars(os.path.join(tb_a, writer))
          != events.read_scalars(os.path.join(tb_b, writer))):
        diffs.append(f"TensorBoard {writer}: scalars differ")
  with open(os.path.join(workdir, "summary.json")) as f:
    sa = json.load(f)
  with open(os.path.join(reference, "summary.json")) as f:
    sb = json.load(f)
  for key in ("test_accuracy", "train_accuracy", "steps"):
    if sa[key] != sb[key]:
      diffs.append(f"summary.json {key}: {sa[key]} != {sb[key]}")
  import jax

  from pe_spectral.training import runner
  quiet = lambda msg: None
  a, b = runner.load_run(workdir, quiet), runner.load_run(reference, quiet)
  if a.step != b.step:
    diffs.append(f"final checkpoint at step {a.step}, the reference's at {b.step}")
  elif not all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a.states), jax.tree.leaves(b.states))):
    diffs.append(f"checkpoint of step {a.step}: arrays differ")
  return diffs


def soak(root: str, faults: list, *, reference: Optional[str] = None, args=ARGS,
         faults_per_run: int = 6, log=print) -> dict:
  """Injects ``faults`` (:func:`draw_faults`) into runs of ``args`` under
  ``root``, resuming each until it finishes, and compares each finished run
  with ``reference`` (trained here first if None). Returns the report."""
  os.makedirs(root, exist_ok=True)
  if reference is None:
    reference = os.path.join(root, "reference")
    shutil.rmtree(reference, ignore_errors=True)
    out = attempt(sweep_command(reference, args), reference, None)
    if out["returncode"] != 0:
      raise RuntimeError(f"the uninterrupted run failed:\n{out['stderr'][-2000:]}")
  injected, resumes, diffs, runs, unexpected = [], 0, [], 0, []
  late, tried_late = 0, []  # faults that came after the process had ended
  todo = list(faults)
  while todo:
    wd = os.path.join(root, f"run{runs}")
    shutil.rmtree(wd, ignore_errors=True)
    runs += 1
    in_run = 0
    while True:
      fault, left = None, _evaluations_left(wd, args)
      if todo and in_run < faults_per_run and left > 0:
        kind, where, delay = todo[0]
        after = int(where * left)  # 0 .. left - 1 progress lines of this attempt
        if kind == "kill-in-save":  # right after a progress line: its save in flight
          after = max(after, 1)
        fault = (kind, after, delay)
      out = attempt(sweep_command(wd, args), wd, fault)
      if fault is not None and not (out["injected"] and out["returncode"] != 0):
        late += 1  # the run ended first: the fault goes to the next attempt, once
        if todo[0] in tried_late:
          todo.pop(0)
        else:
          tried_late.append(todo[0])
      if out["injected"] and out["returncode"] != 0:  # 0: it ended first, no fault
        todo.pop(0)
        in_run += 1
        injected.append({k: out[k] for k in ("kind", "at_step", "cut_save", "returncode")})
        log(f"  fault {len(injected)}: {out['kind']} after step {out['at_step']} "
            f"-> exit {out['returncode']}" + (" (a save cut off)" if out["cut_save"] else ""))
        # -15: a SIGTERM before the sweep's handler was installed (start-up),
        # its default action
        expected = {"SIGKILL": (-9,), "kill-in-save": (-9,), "SIGTERM": (143, -15),
                    "SIGINT": (130,)}
        if out["returncode"] not in expected[out["kind"]]:
          unexpected.append(f"{out['kind']}: exit {out['returncode']}: {out['stderr'][-500:]}")
        if "Traceback" in out["stderr"]:
          unexpected.append(f"{out['kind']}: a traceback: {out['stderr'][-800:]}")
        resumes += 1  # the same command runs next
        continue
      if out["returncode"] != 0:
        unexpected.append(f"a resume exited {out['returncode']}: {out['stderr'][-800:]}")
        break
      if not os.path.exists(os.path.join(wd, "summary.json")):
        continue  # a fault that came too late to land, and the run is not done: again
      diffs += [f"{os.path.basename(wd)}: {d}" for d in compare(wd, reference)]
      break
  report = {"faults": len(injected), "resumes": resumes, "runs": runs, "late": late,
            "differences": diffs, "unexpected": unexpected, "injected": injected,
            "cut_saves": sum(bool(f["cut_save"]) for f in injected),
            "by_kind": {k: sum(f["kind"] == k for f in injected) for k in KINDS}}
  steps = ", ".join(str(f["at_step"]) for f in injected)
  log(f"{len(injected)} faults injected at these steps ({steps}), {resumes} resumes, "
      f"{len(diffs)} differences" + (f", {len(unexpected)} unexpected exits" if unexpected
                                     else ""))
  return report


def main(argv):
  from absl import flags
  FLAGS = flags.FLAGS
  if len(argv) > 1:
    print(f"error: unexpected arguments: {argv[1:]}", file=sys.stderr)
    return 2
  if FLAGS.faults < 1 or FLAGS.faults_per_run < 1:
    print("error: --faults and --faults_per_run must be >= 1", file=sys.stderr)
    return 2
  t0 = time.time()
  report = soak(FLAGS.root, draw_faults(FLAGS.faults, FLAGS.seed),
                faults_per_run=FLAGS.faults_per_run)
  report.update(seconds=round(time.time() - t0), seed=FLAGS.seed, args=ARGS)
  os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
  with open(FLAGS.out, "w") as f:
    json.dump(report, f, indent=1)
  print(f"by kind: {report['by_kind']}; saves cut off: {report['cut_saves']}; "
        f"{report['runs']} runs; {report['seconds']} s; wrote {FLAGS.out}")
  return 0 if not report["differences"] and not report["unexpected"] else 1


if __name__ == "__main__":
  from absl import flags

  from experiments import cli
  flags.DEFINE_integer("faults", 50, "Faults to inject.")
  flags.DEFINE_integer("seed", 0, "Seed of the fault points.")
  flags.DEFINE_integer("faults_per_run", 6, "Faults per run before it may finish.")
  flags.DEFINE_string("root", "benchmarks/out/faults", "Workdirs of the soak.")
  flags.DEFINE_string("out", "benchmarks/out/faults.json", "Report (JSON).")
  cli.run(main, compile_cache=False)

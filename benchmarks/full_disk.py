"""A full disk, many times over: the mid-write case of the suite's full-disk test
(tests/test_sweep.py) run N times in a row, counting what a user would see
beyond the one error line (tracebacks, "Exception ignored", "Event loop is
closed").

  sudo python -m benchmarks.full_disk --runs=20     # needs to mount a tmpfs (root)

Each run: the smoke sweep (2 seeds, 24 steps, an evaluation and a checkpoint
every 6) on an 8 MiB tmpfs whose free space a filler file takes, all but 64
KiB, right before the checkpoint save of step 18 -- so the write itself runs
out of space mid-save, on every machine -- then the filler is removed and the
same command resumes and finishes. The figure: runs, runs with exactly one
error line, tracebacks, finished resumes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS

# The sweep with the disk made full at one chosen moment: a filler file takes
# all but LEFT bytes of the disk right before the checkpoint save (or the
# metrics row) of step STEP. Arguments: FILLER checkpoint|metrics STEP LEFT,
# then the sweep's flags.
FILL_THEN_SWEEP = """
import os, sys
from experiments import cli, sweep
from pe_spectral.training import checkpoint, recorders
filler, where, step_at, left = sys.argv[1:5]
def fill():
  st = os.statvfs(os.path.dirname(filler))
  with open(filler, "wb") as f:
    f.write(bytes(max(st.f_bavail * st.f_frsize - int(left), 0)))
if where == "checkpoint":
  checkpoint.Checkpointer.bytes_needed = lambda self, state: 0  # the write itself runs out
  save = checkpoint.Checkpointer.save
  def save_on_a_full_disk(self, step, state, meta):
    if step == int(step_at):
      fill()
    return save(self, step, state, meta)
  checkpoint.Checkpointer.save = save_on_a_full_disk
else:
  record = recorders.MetricsRecorder.record
  def record_on_a_full_disk(self, ev):
    if ev.step == int(step_at):
      fill()
    return record(self, ev)
  recorders.MetricsRecorder.record = record_on_a_full_disk
sys.argv = ["sweep", *sys.argv[5:]]
cli.run(sweep.main)
"""
SMOKE = ["--preset=smoke", "--seeds=2", "--steps=24", "--eval_every=6"]
NOISE = ("Traceback", "Exception ignored", "Event loop is closed")


def sweep_filling_the_disk(folder: str, where: str, step: int, left: int, *args, env=None):
  """``(CompletedProcess, filler path)``: the sweep with ``args`` whose disk
  (the one ``folder`` is on) fills at ``where`` (``checkpoint``: right before
  the save of ``step``; ``metrics``: right before its metrics row)."""
  filler = os.path.join(folder, "filler")
  out = subprocess.run([sys.executable, "-c", FILL_THEN_SWEEP, filler, where, str(step),
                        str(left), *args], capture_output=True, text=True, timeout=600, env=env)
  return out, filler


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  root = tempfile.mkdtemp(prefix="full-disk-")
  mnt = os.path.join(root, "disk")
  os.makedirs(mnt)
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt]).returncode:
    print("error: cannot mount a tmpfs here (root needed)", file=sys.stderr)
    return 1
  one_line = noisy = finished = 0
  t0 = time.time()
  try:
    for i in range(FLAGS.runs):
      for name in os.listdir(mnt):
        subprocess.run(["rm", "-rf", os.path.join(mnt, name)], check=True)
      wd = os.path.join(mnt, "run")
      out, filler = sweep_filling_the_disk(mnt, "checkpoint", 18, 64 * 1024, *SMOKE,
                                           f"--workdir={wd}")
      errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
      noise = sum(out.stderr.count(n) for n in NOISE)
      one_line += out.returncode == 1 and len(errors) == 1 and "ran out of space" in errors[0]
      noisy += noise
      os.remove(filler)
      again = subprocess.run([sys.executable, "-m", "experiments.sweep", *SMOKE,
                              f"--workdir={wd}"], capture_output=True, text=True)
      finished += again.returncode == 0 and "cut off" in again.stderr
      print(f"run {i + 1}: exit {out.returncode}, {len(errors)} error line(s), {noise} "
            f"traceback line(s); resume exit {again.returncode}", flush=True)
  finally:
    subprocess.run(["umount", "-l", mnt])
  print(f"{FLAGS.runs} mid-write full disks: {one_line} with exactly one error line, "
        f"{noisy} traceback lines, {finished} resumes finished ({time.time() - t0:.0f} s)")
  return 0 if one_line == finished == FLAGS.runs and noisy == 0 else 1


if __name__ == "__main__":
  # defined here, not at import: the suite imports this module's helper beside
  # programs whose flags share names (absl has one namespace)
  flags.DEFINE_integer("runs", 20, "Times the mid-write case is run.")
  app.run(main)

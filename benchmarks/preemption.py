r"""Preemption at the `cpu` preset's own evaluation interval (one epoch, 109
steps): SIGTERM some seconds into an interval, the exit timed against
``--preempt_grace``, then the same command resumes, and the finished run is
compared bit for bit with an uninterrupted one (benchmarks/faults.py's
comparison: every metrics and steps row, every TensorBoard scalar, the final
checkpoint's arrays, the summary's accuracies).

  python -m benchmarks.preemption                      # 2 seeds, 3 epochs, SIGTERM 20 s in
  python -m benchmarks.preemption --seeds=8 --delay=40  # the README's main job's size

The suite tests the same on the smoke preset (tests/test_sweep.py), where an
interval takes seconds; this is the preset users run.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

from benchmarks import faults


def main(argv):
  from absl import flags
  FLAGS = flags.FLAGS
  if len(argv) > 1:
    print(f"error: unexpected arguments: {argv[1:]}", file=sys.stderr)
    return 2
  args = ["--preset=cpu", "--pe=rope", f"--seeds={FLAGS.seeds}", f"--steps={FLAGS.steps}",
          f"--preempt_grace={FLAGS.grace:g}"]
  whole, cut = (os.path.join(FLAGS.root, n) for n in ("whole", "cut"))
  for d in (whole, cut):
    shutil.rmtree(d, ignore_errors=True)
  t0 = time.time()
  ref = faults.attempt(faults.sweep_command(whole, args), whole, None, timeout=3600)
  if ref["returncode"] != 0:
    print(f"error: the uninterrupted run exited {ref['returncode']}:\n{ref['stderr'][-2000:]}",
          file=sys.stderr)
    return 1
  # the fault: after the first progress line (one interval done), FLAGS.delay s later
  got = faults.attempt(faults.sweep_command(cut, args), cut,
                       ("SIGTERM", 1, FLAGS.delay), timeout=3600)
  said = [ln for ln in got["stderr"].splitlines() if "preempted at step" in ln]
  exit_s = got.get("exit_s")
  resumed = faults.attempt(faults.sweep_command(cut, args), cut, None, timeout=3600)
  diffs = faults.compare(cut, whole) if resumed["returncode"] == 0 else ["the resume failed"]
  report = {"args": args, "delay_s": FLAGS.delay, "returncode": got["returncode"],
            "exit_s_after_signal": exit_s, "saved": said, "resume_returncode":
            resumed["returncode"], "differences": diffs, "seconds": round(time.time() - t0)}
  print(json.dumps(report, indent=1))
  return 0 if got["returncode"] == 143 and not diffs else 1


if __name__ == "__main__":
  from absl import flags

  from experiments import cli
  flags.DEFINE_integer("seeds", 2, "Seeds of the run.")
  flags.DEFINE_integer("steps", 327, "Steps (the cpu preset's interval is 109).")
  flags.DEFINE_float("delay", 20.0, "Seconds after the first progress line to send SIGTERM.")
  flags.DEFINE_float("grace", 30.0, "--preempt_grace of the run.")
  flags.DEFINE_string("root", "benchmarks/out/preemption", "Workdirs.")
  cli.run(main, compile_cache=False)

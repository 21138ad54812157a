r"""TensorBoard event files for runs that have none (finished, committed, or
trained without the writer), from their JSONL files.

  python -m experiments.events --workdir=runs/distance/rope,runs/count/nope
  python -m experiments.events --root=studies/arxiv_2505_13027/results/runs
  tensorboard --logdir studies/arxiv_2505_13027/results/runs

``--root`` converts every ``<root>/<task>/<run>/`` with a ``config.json``.
Each run gets ``<run>/tb/seed<s>/`` and ``<run>/tb/mean/`` (written afresh;
``pe_spectral.training.events``). Needs ``tensorboardX``. A sweep writes the same events
as it trains when ``tensorboardX`` is installed.
"""
from __future__ import annotations

import os
import sys

from absl import app, flags

from experiments import cli
from pe_spectral.training import events

FLAGS = flags.FLAGS
flags.DEFINE_list("workdir", [], "Run directories (each with config.json and metrics.jsonl).")
flags.DEFINE_string("root", None, "Convert every <root>/<task>/<run>/ with a config.json.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not events.available():
    print(f"error: writing event files needs tensorboardX: {events.INSTALL_HINT}",
          file=sys.stderr)
    return 2
  wds = list(FLAGS.workdir)
  if FLAGS.root:
    if not os.path.isdir(FLAGS.root):
      print(f"error: --root {FLAGS.root!r} is not a directory", file=sys.stderr)
      return 2
    for task in sorted(os.listdir(FLAGS.root)):
      base = os.path.join(FLAGS.root, task)
      if os.path.isdir(base):
        wds += [os.path.join(base, r) for r in sorted(os.listdir(base))
                if os.path.exists(os.path.join(base, r, "config.json"))]
  if not wds:
    print("error: give --workdir or --root", file=sys.stderr)
    return 2
  _, err = cli.checked_workdirs(wds)
  if err is not None:
    print(f"error: {err}", file=sys.stderr)
    return 2
  for wd in wds:
    n = events.convert(wd)
    print(f"{wd}: {n} evaluation(s) -> {os.path.join(wd, events.SUBDIR)}/")
  return 0


if __name__ == "__main__":
  cli.run(main)

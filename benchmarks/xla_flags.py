"""Which XLA:CPU settings change training speed on this machine, side by side in
one run: the one-seed ``cpu``-preset training throughput (``benchmarks.run``'s
row: RoPE, batch 128, best of 3 chunks of 10 steps) under each setting, each in
its own subprocess (XLA reads ``XLA_FLAGS`` once, at start-up; an unknown flag
aborts that subprocess only, and the row says so).

  python -m benchmarks.xla_flags                       # the default candidates (~6 min)
  python -m benchmarks.xla_flags --settings=base,onednn,base   # a setting twice: the noise

Every setting starts from the project's own (``runtime/xla_config.py``), whose
flags ``base`` keeps unchanged; ``ynn_on`` drops the project's YNN setting.
Settings that change float results (fast math) are not candidates for a
default: the project's speed layer must keep training bit-identical.
"""
from __future__ import annotations

import json
import os
import time

from absl import app, flags

from benchmarks.one_seed import one_seed_training

FLAGS = flags.FLAGS
# name -> (flags added to the project's, whether the project's YNN flag is dropped)
SETTINGS = {
    "base": ("", False),
    "ynn_on": ("", True),
    "onednn": ("--xla_cpu_use_onednn=true", False),
    "no_xnnpack": ("--xla_cpu_use_xnnpack=false", False),
    "eigen_1_thread": ("--xla_cpu_multi_thread_eigen=false", False),
    "vector_512": ("--xla_cpu_prefer_vector_width=512", False),
    "onednn+vector_512": ("--xla_cpu_use_onednn=true --xla_cpu_prefer_vector_width=512", False),
    "concurrency_scheduler": ("--xla_cpu_enable_concurrency_optimized_scheduler=true", False),
    "no_thunk_runtime": ("--xla_cpu_use_thunk_runtime=false", False),
    "fast_math (changes numbers)": ("--xla_cpu_enable_fast_math=true", False),
    # library fusions (jaxlib 0.10 types: individual_dot, individual_convolution, dot,
    # eltwise, reduce); the YNN ones replace the project's "none"
    "onednn_dot": ("--xla_cpu_experimental_onednn_fusion_type=dot", False),
    "xnn_dot": ("--xla_cpu_experimental_xnn_fusion_type=dot", False),
    "xnn_graph_greedy": ("--xla_cpu_experimental_xnn_graph_fusion_mode="
                         "XNN_GRAPH_FUSION_MODE_GREEDY", False),
    "ynn_individual_dot": ("--xla_cpu_experimental_ynn_fusion_type=individual_dot", True),
    "ynn_dot": ("--xla_cpu_experimental_ynn_fusion_type=dot", True),
}
flags.DEFINE_list("settings", list(SETTINGS), "Settings to compare (names above).")
flags.DEFINE_integer("steps", 10, "Timed steps per chunk (cpu preset, one seed, batch 128).")
flags.DEFINE_string("out", "benchmarks/out/xla_flags.json", "JSON output.")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(name: str) -> dict:
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + SETTINGS[name][0]).strip()
  return env


def _train(name: str, steps: int, log) -> dict:
  try:
    row = one_seed_training(name, _env(name), steps, log,
                            ["--xla_cpu_tuning=false"] if SETTINGS[name][1] else [])
  except RuntimeError as e:
    last = str(e).strip().splitlines()[-1][:500]
    log(f"[{name}] failed: {last[:200]}")
    return {"error": last}
  log(f"[{name}] {row['seed_examples_per_s']:.1f} seed-examples/s, MFU {100 * row['mfu']:.1f} %")
  return row


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  bad = [s for s in FLAGS.settings if s not in SETTINGS]
  if bad:
    raise app.UsageError(f"--settings: unknown {bad}; known: {', '.join(SETTINGS)}")
  log = lambda m: print(m, flush=True)
  res = {"date": time.strftime("%Y-%m-%d"), "settings": {}}
  for i, name in enumerate(FLAGS.settings):
    label = name if FLAGS.settings[:i].count(name) == 0 else \
        f"{name} #{FLAGS.settings[:i].count(name) + 1}"
    res["settings"][label] = {"flags": SETTINGS[name][0], "ynn_on": SETTINGS[name][1],
                              **_train(name, FLAGS.steps, log)}
  base = res["settings"].get("base", {}).get("seed_examples_per_s")
  log(f"\n{'setting':<30} {'seed-ex/s':>10} {'MFU':>6} {'vs base':>8}")
  for label, r in res["settings"].items():
    if "error" in r:
      log(f"{label:<30} {'failed':>10}")
      continue
    ratio = f"{r['seed_examples_per_s'] / base:.2f}" if base else "-"
    log(f"{label:<30} {r['seed_examples_per_s']:>10.1f} {100 * r['mfu']:>5.1f}% {ratio:>8}")
  os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
  with open(FLAGS.out, "w") as f:
    json.dump(res, f, indent=1)
  log(f"wrote {FLAGS.out}")
  return 0


if __name__ == "__main__":
  app.run(main)

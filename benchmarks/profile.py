r"""Where one training step's time goes: a ``jax.profiler`` trace of one compiled
chunk, aggregated by XLA op, each op named with its HLO shape.

  python -m benchmarks.profile                      # cpu preset, distance task, rope, batch 128
  python -m benchmarks.profile --task=lm            # the lm_cpu model
  python -m benchmarks.profile --dropout=0 --top=20 # without dropout's random bits

One seed, the chunk the sweep compiles (``train.jit_chunk``), compiled once (its HLO
text is printed), run once to warm up, timed (best of ``--reps`` chunks of ``--steps``
steps), then traced once more. The trace (``jax.profiler.trace(...,
create_perfetto_trace=True)``) holds one event per executed XLA op; their durations are
summed per op and per kind (the op name without its number: ``dot``,
``copy_bitcast_fusion``, ``wrapped_reduce-window``, ...) and printed per step beside the
op's line of the compiled HLO (its shape and operands), which says what the op computes.
Writes the table to ``--out`` (JSON) and keeps the trace and HLO text beside it. Never
part of the test suite.
"""
from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import time

import jax
from absl import app, flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_enum("task", "distance", ["distance", "lm"], "distance: the cpu preset's "
                  "classifier (faithful mode, as benchmarks.run); lm: the lm_cpu model.")
flags.DEFINE_string("pe", "rope", "PE.")
flags.DEFINE_integer("batch", 0, "Batch size (0: the preset's; the classifier: 128).")
flags.DEFINE_float("dropout", -1.0, "Dropout rate (negative: the preset's).")
flags.DEFINE_integer("steps", 10, "Steps per chunk.")
flags.DEFINE_integer("reps", 5, "Timed chunks (best kept) before the traced one.")
flags.DEFINE_integer("top", 40, "Ops listed.")
flags.DEFINE_string("out", "benchmarks/out/profile.json", "JSON output (trace and HLO beside it).")


def _chunk():
  """(chunk, state, keys, ids, labels) of one seed at the flags' configuration."""
  from pe_spectral.data import tasks
  from pe_spectral.training import config, train
  overrides = {"model": {"dropout": FLAGS.dropout}} if FLAGS.dropout >= 0 else None
  if FLAGS.task == "lm":
    rc = config.build("cpu", "lm", FLAGS.pe, overrides=overrides,
                      **({"batch_size": FLAGS.batch} if FLAGS.batch else {}))
    task, n = rc.task, rc.task.num_train
  else:
    rc = config.build("cpu", "distance", FLAGS.pe, faithful=True,
                      batch_size=FLAGS.batch or 128, overrides=overrides)
    task = rc.task.replace(num_examples=max(4 * rc.train.batch_size * (FLAGS.steps + 2), 2000))
    n = None
  data = tasks.generate(task)
  tr = train.make_steps(rc.model, task, rc.train, n or data.train_ids.shape[0])
  keys = train.seed_keys([0])
  state = jax.block_until_ready(train.jit_init(tr)(keys))
  return train.jit_chunk(tr), state, keys, data.train_ids, data.train_labels, rc


def _hlo_lines(hlo: str) -> dict:
  """op name -> its defining line of the HLO text (shape and operands)."""
  lines = {}
  for line in hlo.splitlines():
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (.*)", line)
    if m and m.group(1) not in lines:
      lines[m.group(1)] = re.sub(r", metadata=.*", "", m.group(2))[:160]
  return lines


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  chunk, state, keys, ids, labels, rc = _chunk()
  steps = FLAGS.steps
  # compiled once: the program that is timed, traced and printed as HLO
  compiled = chunk.lower(state, keys, ids, labels, num_steps=steps).compile()
  run = lambda s: jax.block_until_ready(compiled(s, keys, ids, labels))
  state, _ = run(state)  # warm-up
  best = float("inf")
  for _ in range(FLAGS.reps):
    t = time.perf_counter()
    state, _ = run(state)
    best = min(best, (time.perf_counter() - t) / steps)
  out_dir = os.path.dirname(os.path.abspath(FLAGS.out))
  trace_dir = os.path.join(out_dir, "profile_trace")
  os.makedirs(out_dir, exist_ok=True)
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    state, _ = run(state)
  hlo = compiled.as_text()
  with open(os.path.join(out_dir, "profile_hlo.txt"), "w") as f:
    f.write(hlo)
  traces = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"),
                            recursive=True), key=os.path.getmtime)
  with gzip.open(traces[-1]) as f:
    events = json.load(f)
  events = events["traceEvents"] if isinstance(events, dict) else events
  lines = _hlo_lines(hlo)
  per_op = collections.Counter()
  for e in events:  # XLA ops are the events named like an HLO instruction
    if e.get("ph") == "X" and "dur" in e and e["name"] in lines:
      per_op[e["name"]] += e["dur"] / 1e3 / steps  # ms per step
  per_kind = collections.Counter()
  for name, ms in per_op.items():
    per_kind[re.sub(r"(\.\d+)+$", "", name)] += ms
  total = sum(per_op.values())
  log = lambda m: print(m, flush=True)
  log(f"{FLAGS.task}, {FLAGS.pe}, batch {rc.train.batch_size}, dropout {rc.model.dropout}: "
      f"step {1e3 * best:.2f} ms (best of {FLAGS.reps}), XLA ops {total:.2f} ms a step "
      "(summed over threads)")
  log("\nby kind (ms per step):")
  for kind, ms in per_kind.most_common(15):
    log(f"  {ms:7.2f}  {100 * ms / total:5.1f} %  {kind}")
  log(f"\ntop {FLAGS.top} ops (ms per step):")
  for name, ms in per_op.most_common(FLAGS.top):
    log(f"  {ms:6.2f}  {name}: {lines[name]}")
  with open(FLAGS.out, "w") as f:
    json.dump({"task": FLAGS.task, "pe": FLAGS.pe, "batch": rc.train.batch_size,
               "dropout": rc.model.dropout, "step_ms": 1e3 * best, "ops_ms": total,
               "by_kind": dict(per_kind.most_common()),
               "ops": {n: {"ms": ms, "hlo": lines[n]} for n, ms in per_op.most_common()}},
              f, indent=1)
  log(f"wrote {FLAGS.out} (trace: {trace_dir})")
  return 0


if __name__ == "__main__":
  cli.run(main, compile_cache=False)  # sets XLA's CPU flags first

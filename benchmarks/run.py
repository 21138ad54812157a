r"""Training, ablation and compile benchmarks, ratios measured side by side in one run.

  python -m benchmarks.run                         # cpu + paper presets, rope + nope
  python -m benchmarks.run --presets=cpu --steps=20 --no_torch

Prints a table and writes ``benchmarks/out/run.json``. Rows (faithful mode,
i.e. the paper's architecture, so the PyTorch baseline is the same model):

* matmul peak: 2048×2048 float32 matmul GFLOP/s in this process (the MFU denominator);
* train throughput in seed-examples/s and model FLOP utilisation (matmul FLOPs
  of one train step counted on its jaxpr, ``benchmarks/flops.py``) for 1 seed, 8 seeds
  vmapped, and 8 seeds
  one after another (the same compiled 1-seed chunk run 8 times);
* the attention codes side by side (``--attention_impls``): the project's
  kernel (``own``) and ``jax.nn.dot_product_attention`` (``xla``; ``cudnn`` on a
  GPU), 8 seeds vmapped, at dropout 0 for all (the library has no dropout on
  the attention probabilities);
* the PyTorch eager baseline (one seed per process, as the paper's code);
* compile time of the first chunk and the chunk's trace count;
* one seed's step time at several batch sizes, fitted as ``t0 + c*B``: the
  per-step overhead that batching seeds could at most remove (a ceiling on any
  vmap-over-seeds gain on this machine);
* the all-heads ablation: prefix-shared (default) and full-masked, both in one
  vmapped call, vs a Python loop over heads (``cpu``: 3 seeds; ``paper``: 1 seed).

The paper preset is timed at ``--paper_batch`` (default 64, not 512) so a CPU
run stays within minutes; throughput is per example, so batch only matters
through efficiency. Never part of the test suite.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags, logging

from benchmarks.flops import matmul_flops, matmul_peak, timed
from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("presets", "cpu,paper", "Presets to time.")
flags.DEFINE_string("pes", "rope,nope", "PEs to time.")
flags.DEFINE_integer("steps", 10, "Timed steps per measurement (cpu preset).")
flags.DEFINE_integer("paper_steps", 2, "Timed steps per measurement (paper preset).")
flags.DEFINE_integer("paper_batch", 64, "Batch size for the paper preset on CPU.")
flags.DEFINE_integer("reps", 3, "Timed repetitions per row, best kept (cpu preset; "
                     "paper preset: 1).")
flags.DEFINE_integer("seeds", 8, "Seeds for the vmapped / sequential rows.")
flags.DEFINE_bool("torch", True, "Time the PyTorch eager baseline (needs torch).")
flags.DEFINE_bool("ablation", True, "Time vmapped ablation vs a per-head loop.")
flags.DEFINE_string("seed_groups", "1,2",
                    "cpu preset: also time the seeds vmapped in groups of these sizes "
                    "(make_steps seed_group; lax.map over groups).")
flags.DEFINE_integer("small_batch", 16,
                     "Also time the cpu preset at this batch (0: skip).")
flags.DEFINE_integer("ablation_examples", 4096,
                     "Test examples for the ablation rows (paper preset: 1/128 of it).")
flags.DEFINE_string("overhead_batches", "8,16,32,64,128",
                    "cpu preset: fit one seed's step time over these batch sizes "
                    "(empty: skip).")
flags.DEFINE_string("attention_impls", "own,xla",
                    "Attention codes timed side by side (vmapped seeds, dropout 0): own, jax, "
                    "xla, cudnn (the last on a GPU); empty: none.")
flags.DEFINE_string("out", "benchmarks/out/run.json", "JSON output.")


def _best_chunk_seconds(chunk, state, keys, data, steps, reps):
  """Best wall time of ``reps`` calls of ``chunk`` (a :func:`train.jit_chunk`)
  for ``steps`` steps (state threaded through: the chunk donates its input
  state), and the final state."""
  best = float("inf")
  for _ in range(reps):
    dt, (state, _) = timed(lambda: chunk(state, keys, data.train_ids,
                                          data.train_labels, num_steps=steps))
    best = min(best, dt)
  return best, state


def train_rows(preset, pe, steps, batch, seeds, peak, log, seed_groups=(), reps=1,
               attention_impl=None, short=False):
  """The throughput rows of one preset and PE. ``attention_impl``: time that
  attention code at dropout 0 (the library's has no dropout on the
  probabilities; :func:`attention_rows`); ``short``: only the 1-seed and
  ``seeds``-vmapped rows."""
  from pe_spectral.data import tasks
  from pe_spectral.training import config as configs
  from pe_spectral.training import train
  overrides = None if attention_impl is None else {"model": {"dropout": 0.0}}
  rc = configs.build(preset, "distance", pe, faithful=True, batch_size=batch,
                     attention_impl=attention_impl, overrides=overrides)
  task = rc.task.replace(num_examples=max(4 * batch * (steps + 2), 2000))
  data = tasks.generate(task)
  tr = train.make_steps(rc.model, task, rc.train, data.train_ids.shape[0])
  one = train.seed_keys([0])
  # Model FLOPs of one train step (one seed): its matmuls, counted on the jaxpr
  # (benchmarks/flops.py). XLA's cost analysis (every elementwise op) is kept
  # for reference only.
  state1 = jax.tree.map(lambda x: x[0], train.jit_init(tr)(one))
  step = lambda s, x, y: tr.train_step(s, x, y, jax.random.key(0))
  x, y = data.train_ids[:batch], data.train_labels[:batch]
  flops = matmul_flops(step, state1, x, y)
  cost = jax.jit(step).lower(state1, x, y).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  rows = {"xla_cost_analysis_flops_per_step": float(cost.get("flops", float("nan")))}

  def measure(label, keys, repeat=1, tr=tr):
    init, chunk = train.jit_init(tr), train.jit_chunk(tr)
    # Every dispatch is asynchronous: block before each clock starts, or the
    # timed region also runs the tail of the previous (warm-up) call.
    states = jax.block_until_ready(init(keys))
    t_compile, (states, _) = timed(lambda: chunk(
        states, keys, data.train_ids, data.train_labels, num_steps=steps))
    total = 0.0
    for r in range(repeat):
      k = keys if repeat == 1 else train.seed_keys([r])
      st = init(k)
      st, _ = jax.block_until_ready(chunk(st, k, data.train_ids, data.train_labels,
                                          num_steps=steps))  # warm
      total += _best_chunk_seconds(chunk, st, k, data, steps, reps)[0]  # shared machine
    n_seeds = len(keys) * repeat
    ex = n_seeds * steps * batch / total
    rows[label] = {"seed_examples_per_s": ex, "seconds": total,
                   "first_chunk_compile_s": t_compile,
                   "mfu": flops * n_seeds * steps / total / (peak * 1e9)}
    label_shown = label if attention_impl is None else f"{label}, {attention_impl}"
    log(f"  {preset:<5} b{batch:<4} {pe:<5} {label_shown:<14} {ex:9.1f} seed-ex/s  MFU "
        f"{100 * rows[label]['mfu']:5.1f}%  first chunk {t_compile:6.1f}s")

  measure("1 seed", one)
  measure(f"{seeds} vmapped", train.seed_keys(list(range(seeds))))
  if short:
    rows["model"] = dataclasses.asdict(rc.model)
    return rows
  measure(f"{seeds} sequential", one, repeat=seeds)
  for g in seed_groups:  # vmapped groups of g seeds, lax.map over the groups
    grouped = train.make_steps(rc.model, task, rc.train, data.train_ids.shape[0],
                               seed_group=g)
    measure(f"{seeds} in groups of {g}", train.seed_keys(list(range(seeds))), tr=grouped)
  rows["flops_per_step"] = flops
  rows["chunk_traces"] = train.jit_chunk(tr)._cache_size()  # programs compiled
  rows["batch"] = batch
  rows["model"] = dataclasses.asdict(rc.model)
  return rows


def attention_rows(preset, pe, steps, batch, seeds, peak, log, impls, reps=1,
                   torch=None) -> dict:
  """1 seed's and ``seeds`` vmapped seeds' throughput with each attention
  code in ``impls`` (``own`` and the library's ``jax``/``xla``/``cudnn``), all
  at dropout 0 so the model is the same; ratios to ``own`` and, given the
  PyTorch eager row ``torch``, each code's 1-seed rate over PyTorch's."""
  out = {impl: train_rows(preset, pe, steps, batch, seeds, peak, log, reps=reps,
                          attention_impl=impl, short=True) for impl in impls}
  if "own" in out:
    for label in ("1 seed", f"{seeds} vmapped"):
      base = out["own"][label]["seed_examples_per_s"]
      log(f"  => {label}: " + "; ".join(
          f"{impl} / own = {r[label]['seed_examples_per_s'] / base:.2f}x"
          for impl, r in out.items() if impl != "own"))
  if torch:
    log("  => 1 seed / torch eager: " + "; ".join(
        f"{impl} {r['1 seed']['seed_examples_per_s'] / torch['examples_per_s']:.2f}x"
        for impl, r in out.items()))
  return out


def overhead_fit(log, batches, steps=20, preset="cpu", pe="rope"):
  """One seed's step time at several batch sizes, fitted as t(B) = t0 + c*B.

  t0 is the per-step cost that does not grow with the batch (dispatch, loop,
  optimizer, small ops). Batching seeds (vmap) can at most remove that part,
  so (t0 + c*B) / (c*B) bounds its per-seed gain over sequential runs at batch
  B on this machine, whatever the implementation (same per-example work).
  """
  from pe_spectral.data import tasks
  from pe_spectral.training import config as configs
  from pe_spectral.training import train
  times = []
  for b in batches:
    rc = configs.build(preset, "distance", pe, faithful=True, batch_size=b)
    task = rc.task.replace(num_examples=max(4 * b * (steps + 2), 2000))
    data = tasks.generate(task)
    tr = train.make_steps(rc.model, task, rc.train, data.train_ids.shape[0])
    chunk, keys = train.jit_chunk(tr), train.seed_keys([0])
    st = jax.block_until_ready(train.jit_init(tr)(keys))
    st, _ = jax.block_until_ready(chunk(st, keys, data.train_ids, data.train_labels,
                                        num_steps=steps))
    times.append(_best_chunk_seconds(chunk, st, keys, data, steps, 2)[0] / steps)
  c, t0 = np.polyfit(np.asarray(batches, float), np.asarray(times), 1)
  bound = {b: (t0 + c * b) / (c * b) for b in batches}
  per_ex = {b: t / b for b, t in zip(batches, times)}
  log(f"  step time vs batch ({preset}, 1 seed): " + ", ".join(
      f"b{b} {1e3 * t:.1f} ms ({1e6 * per_ex[b]:.0f} us/ex)"
      for b, t in zip(batches, times)) +
      f"; fit t0 = {1e3 * t0:.2f} ms + {1e6 * c:.1f} us/example; ceiling on the "
      "per-seed gain of batching seeds: " + ", ".join(
          f"b{b} {g:.2f}x" for b, g in bound.items()))
  return {"batches": list(batches), "step_seconds": times, "t0_seconds": t0,
          "seconds_per_example": c, "batching_gain_ceiling": bound,
          "seconds_per_example_at_batch": per_ex}


def torch_row(preset, pe, steps, batch, log, reps=1):
  try:
    from benchmarks import torch_baseline
  except ImportError:
    return None
  from pe_spectral.training import config as configs
  rc = configs.build(preset, "distance", pe, faithful=True)
  m = rc.model
  try:
    r = torch_baseline.throughput(vocab=m.vocab_size, d_model=m.d_model,
                                  heads=m.num_heads, layers=m.num_layers, d_ff=m.d_ff,
                                  max_len=rc.task.max_len, batch=batch, pe=pe,
                                  steps=steps, reps=reps)
  except ModuleNotFoundError:
    log("  torch not installed: pip install torch==2.13.0")
    return None
  log(f"  {preset:<5} b{batch:<4} {pe:<5} torch eager    {r['examples_per_s']:9.1f} ex/s")
  return r


def ablation_rows(log, preset: str, seeds: int, examples: int):
  from pe_spectral.analysis import ablation
  from pe_spectral.data import tasks
  from pe_spectral.training import config as configs
  from pe_spectral.training import train
  rc = configs.build(preset, "distance", "rope", faithful=True)
  data = tasks.generate(rc.task)
  tr = train.make_steps(rc.model, rc.task, rc.train.replace(eval_batch_size=min(256, examples)),
                        data.train_ids.shape[0])
  params = train.jit_init(tr)(train.seed_keys(list(range(seeds))))["params"]
  ids, labels = data.test_ids[:examples], data.test_labels[:examples]
  times = {}
  for method in ("shared", "masked"):
    run = lambda: ablation.ablate_heads(tr, params, ids, labels, method=method,
                                        mask_chunk=4)["ablated"]
    times[method] = min(timed(run)[0] for _ in range(2))  # first call compiles
  masks = ablation.head_masks(rc.model.num_layers, rc.model.num_heads)
  ev = jax.jit(jax.vmap(lambda p, m: tr.evaluate_params(p, ids, labels, head_mask=m)[0],
                        in_axes=(0, None)))
  jax.block_until_ready(ev(params, masks[0]))

  def loop():
    return [ev(params, m) for m in [jnp.ones_like(masks[0])] + list(masks)]

  t_l, _ = timed(loop)
  log(f"  ablation {preset} ({masks.shape[0]} heads + baseline, {seeds} seeds, "
      f"{ids.shape[0]} ex.): shared-prefix {times['shared']:.2f}s, masked vmapped "
      f"{times['masked']:.2f}s, per-head loop {t_l:.2f}s; shared ÷ loop "
      f"{t_l / times['shared']:.2f}x, masked ÷ loop {t_l / times['masked']:.2f}x")
  return {"preset": preset, "seeds": seeds, "examples": int(ids.shape[0]),
          "shared_s": times["shared"], "masked_vmapped_s": times["masked"], "loop_s": t_l,
          "speedup_shared": t_l / times["shared"],
          "speedup_masked": t_l / times["masked"]}


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  log = lambda m: print(m, flush=True)
  res = {"date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
         "devices": str(jax.devices()), "xla_flags": os.environ.get("XLA_FLAGS", "")}
  res["matmul_peak_gflops"] = peak = matmul_peak()
  log(f"matmul peak (2048², float32): {peak:.1f} GFLOP/s")
  res["train"] = {}
  from pe_spectral.training import config as configs
  runs = []
  for preset in [p for p in FLAGS.presets.split(",") if p]:
    steps = FLAGS.steps if preset != "paper" else FLAGS.paper_steps
    batch = (FLAGS.paper_batch if preset == "paper"
             else configs.train_settings(preset, "rope", True)["batch_size"])
    runs.append((preset, steps, batch, preset))
  if FLAGS.small_batch and "cpu" in FLAGS.presets.split(","):
    # The overhead-bound regime: the same model at a tiny batch.
    runs.append(("cpu", 4 * FLAGS.steps, FLAGS.small_batch, f"cpu-b{FLAGS.small_batch}"))
  for preset, steps, batch, label in runs:
    for pe in [p for p in FLAGS.pes.split(",") if p]:
      groups = ([int(g) for g in FLAGS.seed_groups.split(",") if g]
                if preset == "cpu" else [])
      row = train_rows(preset, pe, steps, batch, FLAGS.seeds, peak, log, groups,
                       reps=FLAGS.reps if preset != "paper" else 1)
      if FLAGS.torch:
        row["torch"] = torch_row(preset, pe, steps, batch, log,
                                 reps=FLAGS.reps if preset != "paper" else 1)
      vm = row[f"{FLAGS.seeds} vmapped"]["seed_examples_per_s"]
      sq = row[f"{FLAGS.seeds} sequential"]["seed_examples_per_s"]
      row["vmapped_over_sequential"] = vm / sq
      msg = f"  => {FLAGS.seeds} vmapped / {FLAGS.seeds} sequential = {vm / sq:.2f}x"
      if row.get("torch"):
        row["vmapped_over_torch"] = vm / row["torch"]["examples_per_s"]
        msg += f"; vmapped / torch eager = {row['vmapped_over_torch']:.2f}x"
      for g in groups:
        gr = row[f"{FLAGS.seeds} in groups of {g}"]["seed_examples_per_s"]
        msg += f"; groups of {g} / sequential = {gr / sq:.2f}x"
        if row.get("torch"):
          msg += f" (/ torch {gr / row['torch']['examples_per_s']:.2f}x)"
      log(msg)
      impls = [i for i in FLAGS.attention_impls.split(",") if i]
      if impls:
        row["attention"] = attention_rows(preset, pe, steps, batch, FLAGS.seeds, peak, log,
                                          impls, reps=FLAGS.reps if preset != "paper" else 1,
                                          torch=row.get("torch"))
      res["train"][f"{label}/{pe}"] = row
  if FLAGS.overhead_batches and "cpu" in FLAGS.presets.split(","):
    res["overhead_fit"] = overhead_fit(
        log, [int(b) for b in FLAGS.overhead_batches.split(",") if b])
  if FLAGS.ablation:
    res["ablation"] = [ablation_rows(log, p, seeds, n) for p, seeds, n in
                       (("cpu", 3, FLAGS.ablation_examples),
                        ("paper", 1, max(FLAGS.ablation_examples // 128, 1)))
                       if p in FLAGS.presets.split(",")]
  os.makedirs(os.path.dirname(FLAGS.out) or ".", exist_ok=True)
  with open(FLAGS.out, "w") as f:
    json.dump(res, f, indent=1, default=str)
  log(f"wrote {FLAGS.out}")
  return 0


if __name__ == "__main__":
  cli.run(main, compile_cache=False)  # sets XLA's CPU flags first

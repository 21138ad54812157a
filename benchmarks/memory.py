r"""Memory of the compiled programs, measured without running them.

  python -m benchmarks.memory --preset=paper --pe=rope_sinusoidal --faithful --seeds=1,8
  python -m benchmarks.memory --preset=cpu --pe=rope --seeds=8 --seed_group=0,1
  python -m benchmarks.memory --preset=paper --pe=rope_sinusoidal --faithful --seeds=8 \
      --attention_block=0,32 --remat=false,true
  python -m benchmarks.memory --preset=paper --pe=rope_sinusoidal --faithful --seeds=8 \
      --attention_impl=own,xla --dropout=0

For each (seed count, seed group) it lowers and compiles -- never runs -- the
training chunk (``--steps`` steps), the evaluation, and (``--ablation``) the
all-heads ablation, and prints XLA's ``memory_analysis()``: temporaries,
arguments, outputs, and temporaries per seed. On a GPU it also runs one chunk
and prints the device's measured peak (``memory_stats()['peak_bytes_in_use']``).
Compiling needs no accelerator: the CPU backend's numbers are its own
(buffer assignment differs by backend), but they size a GPU run to within the
same order and show what grows with what.
"""
from __future__ import annotations

import dataclasses
import itertools
import sys

from absl import app, flags, logging

from experiments import cli


def _define_flags() -> None:
  """The CLI's flags, defined only when run as a program, so that importing
  ``programs``/``analysis`` (tests, notebooks) defines no absl flag."""
  flags.DEFINE_string("preset", "paper", "Preset (pe_spectral.training.config).")
  flags.DEFINE_string("task", "distance", "distance or count.")
  flags.DEFINE_string("pe", "rope_sinusoidal", "Positional encoding.")
  flags.DEFINE_bool("faithful", False, "The paper's architecture and optimiser.")
  flags.DEFINE_list("seeds", ["1", "8"], "Seed counts to compile for.")
  flags.DEFINE_list("seed_group", ["0"], "Seed groups (0 = one vmap over all seeds).")
  flags.DEFINE_list("steps", ["2"], "Steps in the compiled training chunk (a list: one row "
                    "each, e.g. to time what a chunk length costs with --time_reps).")
  flags.DEFINE_bool("ablation", False, "Also the all-heads ablation program (shared path).")
  flags.DEFINE_integer("mask_chunk", 0, "The ablation's masks per vmapped batch (0: all of "
                       "a layer's at once, as experiments.ablate's default).")
  flags.DEFINE_list("attention_block", ["0"], "Attention kernels: 0 = the standard one, "
                    "N = the blockwise one with N query rows per block.")
  flags.DEFINE_list("attention_impl", ["own"], "Attention codes: own (the project's kernel) "
                    "and/or jax.nn.dot_product_attention's jax, xla, cudnn. The library's has "
                    "no dropout on the attention probabilities: with a preset that has it, "
                    "add --dropout=0 (to every row, so they compare one model).")
  flags.DEFINE_float("dropout", None, "Override the model's dropout rate (all rows).")
  flags.DEFINE_list("remat", ["false"], "Per-block rematerialisation: false, true or both.")
  flags.DEFINE_list("dtype", ["float32"], "Compute dtypes: float32, bfloat16 or both.")
  flags.DEFINE_integer("time_reps", 0, "If > 0: also run the training chunk on real data "
                       "this many times after a warm-up and print its best seconds per "
                       "step (the memory options' cost, side by side in one run).")
  flags.DEFINE_integer("eval_examples", 0, "Examples the evaluation compiles for (0: the "
                       "preset's test split).")


FLAGS = flags.FLAGS

GIB = 1024 ** 3


def _ints(name, values, minimum):
  try:
    out = [int(v) for v in values]
  except ValueError:
    raise app.UsageError(f"--{name} must be a comma list of ints, got {values}") from None
  if not out or min(out) < minimum:
    raise app.UsageError(f"--{name} values must be >= {minimum}, got {out}")
  return out


def _bools(name, values):
  table = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}
  try:
    return [table[v.strip().lower()] for v in values]
  except KeyError:
    raise app.UsageError(f"--{name} must be a comma list of true/false, got {values}") from None


def analysis(compiled) -> dict:
  """Bytes of a compiled program: temporaries, arguments, outputs, code."""
  m = compiled.memory_analysis()
  get = lambda k: int(getattr(m, k, 0) or 0)
  return {"temp": get("temp_size_in_bytes"), "argument": get("argument_size_in_bytes"),
          "output": get("output_size_in_bytes"), "alias": get("alias_size_in_bytes"),
          "code": get("generated_code_size_in_bytes")}


def programs(rc, seeds: int, seed_group, *, steps: int, ablation: bool, eval_examples: int,
             mask_chunk: int = 0):
  """``{name: compiled}`` for one configuration, from shapes only."""
  from pe_spectral.analysis import ablation as abl
  from pe_spectral.training import sizing, train
  num_train = rc.task.num_train
  tr = train.make_steps(rc.model, rc.task, rc.train, num_train, seed_group=seed_group)
  n_eval = eval_examples or (rc.task.num_examples - num_train)
  out = {"train chunk": sizing.compile_chunk(tr, seeds, num_steps=steps),
         "evaluation": sizing.compile_eval(tr, seeds, n_eval)}
  if ablation:
    fn = abl._all_seeds_program(tr, "head", "single", False, mask_chunk or None, "shared")
    out["ablation (all heads)"] = fn.lower(tr.abstract_state(seeds)["params"],
                                           *sizing.data_shapes(tr, n_eval)).compile()
  return tr, out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  from pe_spectral.pe import encodings
  from pe_spectral.training import config as configs
  if FLAGS.pe not in encodings.names():
    raise app.UsageError(f"unknown --pe {FLAGS.pe!r}")
  if FLAGS.preset not in configs.PRESET_NAMES:
    raise app.UsageError(f"unknown --preset {FLAGS.preset!r}; valid: "
                         f"{', '.join(configs.PRESET_NAMES)}")
  seeds_list = _ints("seeds", FLAGS.seeds, 1)
  groups = _ints("seed_group", FLAGS.seed_group, 0)
  steps_list = _ints("steps", FLAGS.steps, 1)
  if FLAGS.eval_examples < 0:
    raise app.UsageError("--eval_examples must be >= 0")
  import jax
  overrides = None if FLAGS.dropout is None else {"model": {"dropout": FLAGS.dropout}}
  rc = configs.build(FLAGS.preset, FLAGS.task, FLAGS.pe, faithful=FLAGS.faithful,
                     overrides=overrides)
  dev = jax.devices()[0]
  print(f"# {FLAGS.preset} preset, {FLAGS.task}, {FLAGS.pe}"
        f"{' (faithful)' if FLAGS.faithful else ''}: batch {rc.train.batch_size}, "
        f"{rc.model.num_layers} layers, d {rc.model.d_model}, {rc.model.num_heads} heads, "
        f"length {rc.task.max_len}; {jax.default_backend()} ({dev.device_kind}), "
        f"jax {jax.__version__}", flush=True)
  blocks = _ints("attention_block", FLAGS.attention_block, 0)
  remats = _bools("remat", FLAGS.remat)
  impls = [i.strip() for i in FLAGS.attention_impl]
  bad = [i for i in impls if i not in ("own", "jax", "xla", "cudnn")]
  if bad:
    raise app.UsageError(f"--attention_impl takes own, jax, xla, cudnn; got {', '.join(bad)}")
  if set(impls) - {"own"} and rc.model.drops_attention_probs:
    raise app.UsageError(f"--attention_impl={','.join(impls)}: the library's attention has no "
                         f"dropout on the attention probabilities, which this preset trains "
                         f"with at {rc.model.dropout}; add --dropout=0")
  if set(impls) - {"own"} and blocks != [0]:
    raise app.UsageError("--attention_block is the project's kernel: give it with "
                         "--attention_impl=own only")
  dtypes = [d.strip() for d in FLAGS.dtype]
  bad = [d for d in dtypes if d not in ("float32", "bfloat16")]
  if bad:
    raise app.UsageError(f"--dtype takes float32 and/or bfloat16, got {', '.join(bad)}")
  if FLAGS.time_reps < 0:
    raise app.UsageError("--time_reps must be >= 0")
  print("| seeds | seed group | attention | remat | dtype | chunk steps | program "
        "| temporaries GiB | per seed GiB | arguments GiB | outputs GiB | measured peak GiB "
        "| train s/step |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  base = rc
  for seeds, g, impl, block, remat, dt, steps in itertools.product(
      seeds_list, groups, impls, blocks, remats, dtypes, steps_list):
    try:
      rc = dataclasses.replace(base, model=base.model.replace(
          attention_block=block or None, remat=remat or None,
          dtype=None if dt == "float32" else dt, attention_impl=impl))
    except ValueError as e:
      raise app.UsageError(str(e)) from None
    kernel = (f"blockwise {block}" if block else "standard") if impl == "own" \
        else f"jax.nn {impl}"
    if g and seeds % g:
      print(f"# skip: seed group {g} does not divide {seeds} seeds", file=sys.stderr)
      continue
    if impl == "cudnn" and dt == "float32":
      print("# skip: cuDNN's fused attention takes bfloat16 (or float16) only, not float32",
            file=sys.stderr)
      continue
    group = None if g == 0 or g == seeds else g
    print(f"# compiling {seeds} seeds, group {g or 'all'}, {kernel} attention, "
          f"remat {'on' if remat else 'off'}, {dt} ...", file=sys.stderr, flush=True)
    tr, progs = programs(rc, seeds, group, steps=steps, ablation=FLAGS.ablation,
                         eval_examples=FLAGS.eval_examples, mask_chunk=FLAGS.mask_chunk)
    per_step = peak = None
    if FLAGS.time_reps or jax.default_backend() == "gpu":  # runs it (a GPU: for its peak)
      per_step, peak = _run_chunks(tr, rc, seeds, FLAGS.time_reps, steps,
                                   compiled=progs["train chunk"])
    for name, compiled in progs.items():
      a = analysis(compiled)
      pk = "—" if peak is None or name != "train chunk" else f"{peak / GIB:.2f}"
      ts = "—" if per_step is None or name != "train chunk" else f"{per_step:.3f}"
      print(f"| {seeds} | {g or 'all'} | {kernel} | {'on' if remat else 'off'} | {dt} | "
            f"{steps} | {name} | "
            f"{a['temp'] / GIB:.2f} | "
            f"{a['temp'] / seeds / GIB:.2f} | {a['argument'] / GIB:.3f} | "
            f"{a['output'] / GIB:.3f} | {pk} | {ts} |", flush=True)
  return 0


_DATA = {}  # one generated dataset per task configuration, shared by the rows


def _run_chunks(tr, rc, seeds: int, reps: int, steps: int, *, compiled):
  """Runs the training chunk (``steps`` steps) on real data: once, then
  ``reps`` more times. ``(best seconds per step over the timed chunks or None,
  the device's peak bytes or None)``; the first chunk is not timed.
  ``compiled``: the chunk :func:`programs` compiled from shapes, run as it is
  -- on a GPU a second compile of the paper model costs tens of seconds per
  row (the 2026-12-04 device check ran out of time compiling). The peak is
  the process's running maximum (``memory_stats``, GPU/TPU only)."""
  import time

  import jax

  from pe_spectral.data import tasks
  from pe_spectral.training import train
  if rc.task not in _DATA:
    _DATA[rc.task] = tasks.generate(rc.task)
  data = _DATA[rc.task]
  keys = train.seed_keys(list(range(seeds)))
  states = train.jit_init(tr)(keys)
  best = None
  for i in range(reps + 1):
    t0 = time.perf_counter()
    states, losses = compiled(states, keys, data.train_ids, data.train_labels)
    jax.block_until_ready(losses)
    if i:
      per_step = (time.perf_counter() - t0) / steps
      best = per_step if best is None else min(best, per_step)
  stats = (jax.devices()[0].memory_stats() or {}) if jax.default_backend() != "cpu" else {}
  return best, stats.get("peak_bytes_in_use")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)

r"""Head ablation of a trained sweep: every (layer, head) of every seed in one compiled call.

  python -m experiments.ablate --workdir=runs/distance/rope
  python -m experiments.ablate --workdir=runs/distance/rope --mode=keep_only --split=all

Writes ``ablation.json`` (``ablation-<mode>[-leak][-<split>].json`` for
non-default settings) and a heatmap PNG into the workdir: per seed, layer and
head the accuracy with that head knocked out, the baseline, drop = baseline -
ablated, and per layer the deposit score (see
``pe_spectral.analysis.ablation.deposit_scores``) with a 95% interval over seeds.
"""
from __future__ import annotations

import os
import sys
import time

import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging

from experiments import cli
from pe_spectral.pe import encodings

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "A sweep workdir (config.json + ckpt/), or a "
                    "comma list of them (analysed one after another in one process).")
flags.DEFINE_enum("mode", "single", ["single", "keep_only"],
                  "single: knock out one head; keep_only: knock out all others in its layer.")
flags.DEFINE_enum("split", "test", ["test", "all"],
                  "Evaluate on the test split (default) or train+test (the paper).")
flags.DEFINE_bool("leak", False, "Reproduce the paper's leak (head H-1 of finished "
                  "layers stays zeroed).")
flags.DEFINE_string("mask_chunk", "auto", "Memory: masks per vmapped batch, or 'auto' (the "
                    "default): the widest seed group x mask batch whose compiled program "
                    "fits 90% of the device's free memory (XLA's memory analysis). "
                    "--frequencies uses the number given, else 2.")
flags.DEFINE_string("seed_group", "auto", "Memory: vmap this many seeds at a time, the "
                    "groups one after another in the same program, or 'auto' (see "
                    "--mask_chunk). At the paper preset --seed_group=1 --mask_chunk=1 "
                    "needs about 6 GiB per program (benchmarks/README.md). Numbers are "
                    "the same whatever the setting.")
cli.define_memory_flags("With an 'auto' --seed_group/--mask_chunk", "the ablation")
flags.DEFINE_bool("frequencies", False,
                  "Also knock out each (layer, head, rotary pair)'s rotation (θ_k -> 0) and "
                  "write ablation-freq.json + a heads x frequencies heatmap per seed "
                  "(rotary PEs only).")
flags.DEFINE_integer("examples", None, "Evaluate on the first N examples of the split "
                     "(default: all of it).")
flags.DEFINE_enum("method", "shared", ["shared", "masked"],
                  "shared: reuse the un-ablated prefix (layers < l, layer l's attention); "
                  "masked: the full masked model per mask (the reference; --leak uses it).")


def output_name(mode: str, leak: bool, split: str) -> str:
  name = "ablation"
  if mode != "single":
    name += f"-{mode}"
  if leak:
    name += "-leak"
  if split != "test":
    name += f"-{split}"
  return name


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  wds, err = cli.checked_workdirs(FLAGS.workdir)
  if err is not None:
    print(f"error: {err}", file=sys.stderr)
    return 2
  if FLAGS.leak and FLAGS.mode != "single":
    print("error: --leak only applies to --mode=single", file=sys.stderr)
    return 2
  if FLAGS.examples is not None and FLAGS.examples < 1:
    print("error: --examples must be >= 1", file=sys.stderr)
    return 2
  for name in ("seed_group", "mask_chunk"):
    if memory_option(getattr(FLAGS, name)) is None:
      print(f"error: --{name} must be 'auto' or an integer >= 1, got "
            f"{getattr(FLAGS, name)!r}", file=sys.stderr)
      return 2
  if err := cli.memory_flags_error(FLAGS.memory_gib, FLAGS.memory_fraction):
    print(f"error: {err}", file=sys.stderr)
    return 2
  return max(analyse(wd) for wd in wds)


def memory_option(value: str):
  """``"auto"``, an int >= 1, or None when ``value`` is neither."""
  if value == "auto":
    return value
  try:
    n = int(value)
  except ValueError:
    return None
  return n if n >= 1 else None


def fit_memory(loaded, ids, labels, seed_group, mask_chunk):
  """``(steps, seed_group, mask_chunk)`` for the ablation: the given numbers,
  and for each ``"auto"`` the widest that fits the device's free memory
  (``ablation.fit_memory``); the choice goes to stderr."""
  from pe_spectral.analysis import ablation
  from pe_spectral.runtime import memory
  from pe_spectral.training import train
  rc, n_train = loaded.rc, loaded.data.train_ids.shape[0]
  steps_for = lambda g: train.make_steps(rc.model, rc.task, rc.train, n_train, seed_group=g)
  if "auto" not in (seed_group, mask_chunk):
    return loaded.steps, seed_group, mask_chunk
  num_seeds = len(loaded.config["seeds"])
  num_masks = ablation.masks_per_batch(rc.model, mode=FLAGS.mode, leak=FLAGS.leak,
                                       method=FLAGS.method)
  usable, source = memory.memory_budget(memory_gib=FLAGS.memory_gib,
                                       fraction=FLAGS.memory_fraction)
  if usable is None:
    print(f"memory auto: {source}; all seeds and masks at once", file=sys.stderr)
    g = None if seed_group == "auto" else seed_group
    return steps_for(g), g, None if mask_chunk == "auto" else mask_chunk
  # on several devices the seeds are sharded, not grouped (as runner.load_run)
  groups = ([None] if loaded.mesh is not None
            else None if seed_group == "auto" else [seed_group])
  needs = lambda g, c: ablation.ablation_bytes(
      steps_for(g), loaded.states["params"], ids, labels, mode=FLAGS.mode, leak=FLAGS.leak,
      mask_chunk=c, method=FLAGS.method)
  g, c, measured = ablation.fit_memory(
      needs, num_seeds=num_seeds, num_masks=num_masks, limit_bytes=usable,
      seed_groups=groups, mask_chunks=None if mask_chunk == "auto" else [mask_chunk])
  gib = lambda b: f"{b / 1024 ** 3:.2f} GiB"
  name = lambda g, c: f"--seed_group={g or num_seeds} --mask_chunk={c or num_masks}"
  tried = "; ".join(f"{name(*gc)}: {gib(b)}" for gc, b in measured.items())
  verdict = "fits" if measured[(g, c)] <= usable else "does not fit either; trying it"
  print(f"memory auto: {name(g, c)} {verdict} (usable {gib(usable)}, {source}; "
        f"tried {tried})", file=sys.stderr)
  return steps_for(g), g, c


def analyse(wd: str) -> int:
  """Analyses one workdir; 0, or 2 after a one-line error."""
  from pe_spectral.analysis import ablation, plotting, stats
  from pe_spectral.runtime import devices
  from pe_spectral.training import runner
  t0 = time.time()
  try:  # refused before any restore
    num_seeds = len(runner.read_config(os.path.join(wd, "config.json"))["seeds"])
  except (runner.BadFileError, KeyError, TypeError) as e:
    print(f"error: {cli.error_line(e) if isinstance(e, runner.BadFileError) else e!r}",
          file=sys.stderr)
    return 2
  seed_group, mask_chunk = (memory_option(FLAGS.seed_group),
                            memory_option(FLAGS.mask_chunk))
  if seed_group != "auto" and num_seeds % seed_group:
    print(f"error: --seed_group {seed_group} must divide the run's "
          f"{num_seeds} seeds", file=sys.stderr)
    return 2
  try:
    loaded = runner.load_run(wd, seed_group=None if seed_group == "auto" else seed_group)
  except (runner.CheckpointError, runner.BadFileError) as e:
    print(f"error: {cli.error_line(e)}", file=sys.stderr)
    return 2
  config, rc, steps, states, data, step, mesh = loaded
  ids, labels = data.test_ids, data.test_labels
  if FLAGS.split == "all" and rc.task.is_lm:  # a language model: its fixed windows of both
    ids = jnp.concatenate([data.train_eval_ids, data.test_ids])
    labels = jnp.zeros((ids.shape[0],), jnp.int32)
  elif FLAGS.split == "all":
    ids = jnp.concatenate([data.train_ids, data.test_ids])
    labels = jnp.concatenate([data.train_labels, data.test_labels])
  if FLAGS.examples is not None:
    if FLAGS.examples > ids.shape[0]:
      print(f"note: --examples={FLAGS.examples} exceeds the split's {ids.shape[0]} examples; "
            "using all of them", file=sys.stderr)
    ids, labels = ids[:FLAGS.examples], labels[:FLAGS.examples]
  ids, labels = devices.replicate((ids, labels), mesh)
  steps, seed_group, mask_chunk = fit_memory(loaded, ids, labels, seed_group, mask_chunk)
  res = ablation.ablate_heads(steps, states["params"], ids, labels,
                              mode=FLAGS.mode, leak=FLAGS.leak,
                              mask_chunk=mask_chunk, method=FLAGS.method)
  dep = ablation.deposit_scores(res["baseline"], res["ablated"])
  # bounded per-seed scores: percentile-bootstrap CIs over seeds, per layer
  score_ci = [stats.bootstrap_mean_ci(col) for col in dep["score"].T]
  bounded_ci = [stats.bootstrap_mean_ci(col) for col in dep["score_bounded"].T]
  drop_ci = [stats.bootstrap_mean_ci(col) for col in 100 * dep["max_drop"].T]
  mean_drop = 100 * dep["drops"].mean(0)
  out = {
      "workdir": os.path.abspath(wd), "step": step, "pe": rc.model.pe,
      "task": rc.task.name, "faithful": rc.model.faithful, "preset": rc.preset,
      "rope_heads": encodings.rope_heads_option(rc.model), "seeds": config["seeds"],
      "mode": FLAGS.mode, "leak": FLAGS.leak, "split": FLAGS.split,
      "num_examples": int(ids.shape[0]),
      "baseline": res["baseline"].tolist(),
      "ablated": res["ablated"].tolist(),
      "drop": dep["drops"].tolist(),
      "mean_drop_points": mean_drop.tolist(),
      "deposit_score": dep["score"].tolist(),
      "deposit_score_mean": [m for m, _, _ in score_ci],
      "deposit_score_ci95": [[lo, hi] for _, lo, hi in score_ci],
      # in [0, 1] (drops clipped at 0; ablation.deposit_scores): the original
      # score exceeds 1 where a knock-out raises accuracy
      "deposit_score_bounded": dep["score_bounded"].tolist(),
      "deposit_score_bounded_mean": [m for m, _, _ in bounded_ci],
      "deposit_score_bounded_ci95": [[lo, hi] for _, lo, hi in bounded_ci],
      "max_drop_points_mean": [m for m, _, _ in drop_ci],
      "max_drop_points_ci95": [[lo, hi] for _, lo, hi in drop_ci],
      "argmax_head": dep["argmax_head"].tolist(),
      "wall_seconds": time.time() - t0,
  }
  name = output_name(FLAGS.mode, FLAGS.leak, FLAGS.split)
  runner.write_json(os.path.join(wd, name + ".json"), out)
  title = (f"{rc.task.name} / {rc.model.pe}" + (" (faithful)" if rc.model.faithful else "")
           + f"\nmean accuracy drop (points), {FLAGS.mode}, "
           f"{len(config['seeds'])} seeds")
  plotting.ablation_heatmap(mean_drop, os.path.join(wd, name + ".png"), title)
  print(f"checkpoint step {step}; baseline {100 * res['baseline'].mean():.2f}% over "
        f"{len(config['seeds'])} seeds; {res['ablated'][0].size} ablations in "
        f"{out['wall_seconds']:.1f}s (95% bootstrap CIs over seeds)")
  for l in range(mean_drop.shape[0]):
    h = int(np.argmax(mean_drop[l]))
    (dm, dlo, dhi), (sm, slo, shi) = drop_ci[l], score_ci[l]
    bm, blo, bhi = bounded_ci[l]
    print(f"  layer {l}: head {h} has the largest mean drop, {mean_drop[l, h]:.1f} points; "
          f"each seed's largest drop {dm:.1f} [{dlo:.1f}, {dhi:.1f}]; deposit score "
          f"{sm:.2f} [{slo:.2f}, {shi:.2f}], bounded {bm:.2f} [{blo:.2f}, {bhi:.2f}]")
  if FLAGS.frequencies:
    return analyse_frequencies(wd, steps, states, ids, labels, config, rc, step,
                               dep["argmax_head"], name)
  return 0


def analyse_frequencies(wd, steps, states, ids, labels, config, rc, step, deposit_head,
                        name) -> int:
  """Frequency-band knock-outs beside the head ablation ``name``."""
  from pe_spectral.analysis import ablation, plotting
  t0 = time.time()
  try:
    # L*H*P masks per seed: all of a layer's masks at once needed 45 GB for
    # 8 seeds x 2,000 examples at the cpu preset; 2 at a time fit in a few GB
    given = memory_option(FLAGS.mask_chunk)
    chunk = given if given != "auto" else 2
    res = ablation.ablate_frequencies(steps, states["params"], ids, labels,
                                      mask_chunk=chunk, method=FLAGS.method)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  drop = 100 * (res["baseline"][:, None, None, None] - res["ablated"])  # points
  out = {"workdir": os.path.abspath(wd), "step": step, "pe": rc.model.pe,
         "task": rc.task.name, "faithful": rc.model.faithful, "preset": rc.preset,
         "seeds": config["seeds"], "split": FLAGS.split, "num_examples": int(ids.shape[0]),
         "head_ablation": name + ".json", "frequencies": res["frequencies"].tolist(),
         "baseline": res["baseline"].tolist(), "ablated": res["ablated"].tolist(),
         "drop_points": drop.tolist(), "deposit_head": np.asarray(deposit_head).tolist(),
         "wall_seconds": time.time() - t0}
  fname = name.replace("ablation", "ablation-freq", 1)
  runner_write(os.path.join(wd, fname + ".json"), out)
  plotting.frequency_heatmaps(drop[:, 0], res["frequencies"], np.asarray(deposit_head)[:, 0],
                              config["seeds"], os.path.join(wd, fname + ".png"),
                              f"{rc.task.name} / {rc.model.pe}: layer 0, drop (points) with "
                              "one head's pair k unrotated")
  L, H, P = drop.shape[1:]
  print(f"frequency knock-outs: {L * H * P} per seed in {out['wall_seconds']:.1f}s")
  for s, seed in enumerate(config["seeds"]):
    h = int(deposit_head[s][0])
    k = int(np.argmax(drop[s, 0, h]))
    print(f"  seed {seed}: layer-0 deposit head {h}: largest drop {drop[s, 0, h, k]:.1f} "
          f"points at pair {k} (θ = {res['frequencies'][k]:.3g})")
  return 0


def runner_write(path, obj):
  from pe_spectral.training import runner
  runner.write_json(path, obj)


if __name__ == "__main__":
  cli.run(main)

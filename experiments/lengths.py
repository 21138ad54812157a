r"""Length generalisation of finished runs: train short, test long.

  python -m experiments.lengths --workdir=runs/distance/rope
  python -m experiments.lengths --workdir=runs/distance/rope,runs/distance/alibi \
      --out=runs/lengths_distance.png
  python -m experiments.lengths --workdir=runs/distance/rope --rope_scaling=yarn

Every seed of each run is evaluated at each test length (default 1, 1.5, 2, 3
and 4 times the training length) in one compiled, seed-vmapped program per
length. The test sets keep the training label range (``tasks.lengthened``):
Task 1 the same distances with longer side segments, Task 2 the same counts
in longer sequences; at 1x the run's own test split is used. ``--shift=S``
also moves every sentence right by a random 0..S pad tokens (clean runs only:
padding is masked there).

Writes ``lengths[-<scaling>][-shift<S>].json`` and ``.png`` into each workdir
(per seed, per length; mean and percentile-bootstrap CI over seeds), and the
spectral prediction beside each length (``extrapolation.Prediction``): the
ALiBi bias spread (closed form, grows as 0.55 m n^2), the symbol bounds of
each learned relative-bias head (symmetric part; offsets beyond the table
reuse its last entry), and RoPE's ``rope_min_base`` against the run's base. A PE whose
table cannot reach a
length (learned absolute positions) is reported as such, never clamped.

A language model (``--task=lm`` run) gets the field's evaluations instead
(``analysis/language.py``; docs/language.md): bits per byte on disjoint windows
of the test split at 1, 2, 4, 8 and 16 times the training length (per seed,
mean and bootstrap CI; ``--tokens`` scored per length), loss against token
position, the same with every RoPE scaling (``--lm_scalings``; rotary PEs
only) on the same table and plot, and passkey retrieval against length and
depth. It writes ``lengths.json``, ``lengths.png``, ``loss_by_position.png``
and ``passkey.png`` into the workdir.
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
from absl import app, flags, logging

from experiments import cli
from pe_spectral.pe import encodings, positional

FLAGS = flags.FLAGS
flags.DEFINE_list("workdir", None, "Finished sweep workdirs (comma list).")
flags.DEFINE_list("factors", ["1", "1.5", "2", "3", "4"],
                  "Test lengths as multiples of the training length (>= 1).")
flags.DEFINE_integer("examples", 2000, "Test examples per length.")
flags.DEFINE_integer("shift", 0, "Move each sentence right by a random 0..shift pad "
                     "tokens (clean runs only).")
flags.DEFINE_enum("rope_scaling", "none", ["none", *positional.ROPE_SCALINGS],
                  "Eval-time context extension of rotary PEs (factor = test length / "
                  "training length): pi, ntk (at each length's own factor: also Hugging "
                  "Face's dynamic NTK), yarn (as the reference implementations compute it), "
                  "yarn_turns (as the YaRN paper's equation is written), llama3 (Llama 3.1's "
                  "scaling, low/high frequency factors 1 and 4).")
flags.DEFINE_string("out", None, "Also draw all workdirs in one figure here.")
flags.DEFINE_integer("tokens", 32768, "Language models: tokens scored per length and seed "
                     "(disjoint windows of the test split; fewer if the split is shorter).")
flags.DEFINE_list("lm_scalings", ["pi", "ntk", "yarn", "llama3"],
                  "Language models with a rotary PE: the RoPE scalings also evaluated at "
                  "every length (beside none); empty for none.")
flags.DEFINE_list("passkey_depths", ["0", "0.25", "0.5", "0.75", "1"],
                  "Language models: passkey needle depths (0 = start, 1 = end).")
flags.DEFINE_integer("passkey_trials", 4, "Language models: passkeys per (length, depth); "
                     "0 skips the passkey test.")
LM_FACTORS = [1.0, 2.0, 4.0, 8.0, 16.0]


def _is_lm(workdir: str) -> bool:
  """Whether a workdir's run is a language model (its config's task)."""
  from pe_spectral.training.workdir import read_config
  return read_config(os.path.join(workdir, "config.json"))["run"]["task"]["name"] == "lm"


def output_name(rope_scaling: str, shift: int) -> str:
  name = "lengths"
  if rope_scaling != "none":
    name += f"-{rope_scaling}"
  if shift:
    name += f"-shift{shift}"
  return name


def _factors(values) -> list[float]:
  try:
    out = [float(v) for v in values]
  except ValueError:
    raise ValueError(f"--factors must be numbers, got {','.join(values)!r}") from None
  if not out or any(not math.isfinite(f) or f < 1.0 for f in out):
    raise ValueError(f"--factors must be finite numbers >= 1, got {','.join(values)!r}")
  return sorted(set(out))


def evaluate_lengths(wd: str, factors, *, examples: int, shift: int,
                     rope_scaling: str, log=print) -> dict:
  """The ``lengths.json`` dict of one workdir (see module docstring)."""
  from pe_spectral.analysis import extrapolation, stats
  from pe_spectral.data import tasks
  from pe_spectral.runtime import devices
  from pe_spectral.training import runner, train
  run = runner.load_run(wd)
  config, rc, states, data, step = run.config, run.rc, run.states, run.data, run.step
  if shift and rc.model.faithful:
    raise ValueError("--shift needs a clean run: faithful models do not mask "
                     "padding, so pad tokens would change the content")
  if rope_scaling != "none" and "rotary" not in rc.model.encoding.kinds:
    raise ValueError(f"--rope_scaling applies to rotary PEs, not {rc.model.pe!r}")
  train_len = rc.task.seq_len
  # a string task trains on lengths min_len..seq_len: its 1x row is new strings
  # of exactly seq_len tokens, like every longer row
  one_length = rc.task.name not in tasks.STRING_TASKS or rc.task.min_len == rc.task.seq_len
  seeds = config["seeds"]
  rows = []
  rng = np.random.default_rng(0)
  for f in factors:
    n = int(round(f * train_len))
    t0 = time.time()
    if n == train_len and one_length:  # the run's own test split
      ids, labels = np.asarray(data.test_ids), np.asarray(data.test_labels)
      ids, labels = ids[:examples], labels[:examples]
    else:
      d = tasks.generate(tasks.lengthened(rc.task, n), num_examples=examples)
      ids = np.concatenate([np.asarray(d.train_ids), np.asarray(d.test_ids)])
      labels = np.concatenate([np.asarray(d.train_labels), np.asarray(d.test_labels)])
    if shift:
      ids = tasks.shift_right(ids, rng.integers(0, shift + 1, ids.shape[0]))
    model = extrapolation.eval_model_config(rc.model, ids.shape[1], train_len, rope_scaling)
    batching = extrapolation.eval_train_config(rc.train, train_len, n)
    evaluate = train.jit_evaluate(train.make_steps(model, rc.task, batching,
                                                   run.steps.num_train))
    row = {"factor": f, "seq_len": n, "input_len": int(ids.shape[1]),
           "num_examples": int(ids.shape[0])}
    try:
      acc, _ = evaluate(states["params"], *devices.replicate((ids, labels), run.mesh))
      acc = devices.fetch(acc)
      mean, lo, hi = stats.bootstrap_mean_ci(acc)
      row.update(accuracy=acc.tolist(), mean=mean, ci95=[lo, hi], error=None)
      msg = f"{100 * mean:.2f}% [{100 * lo:.2f}, {100 * hi:.2f}]"
    except ValueError as e:  # e.g. beyond a learned position table
      row.update(accuracy=None, mean=None, ci95=None, error=str(e).splitlines()[0])
      msg = f"not evaluated: {row['error']}"
    row["prediction"] = extrapolation.predict(model, states["params"], n, train_len).to_dict()
    rows.append(row)
    log(f"[{os.path.relpath(wd)}] length {n} ({f:g}x): {msg}  ({time.time() - t0:.1f} s)")
  return {"workdir": os.path.abspath(wd), "step": step, "pe": rc.model.pe,
          "task": rc.task.name, "faithful": rc.model.faithful, "preset": rc.preset,
          "rope_heads": encodings.rope_heads_option(rc.model),
          "random_positions": rc.model.random_positions,
          "seeds": seeds, "train_len": train_len, "rope_scaling": rope_scaling,
          "shift": shift, "lengths": rows}


def evaluate_lm(wd: str, factors, *, tokens: int, scalings, depths, trials: int,
                log=print) -> dict:
  """The ``lengths.json`` dict of one language-model workdir (module docstring)."""
  import jax

  from pe_spectral.analysis import extrapolation, language, stats
  from pe_spectral.data import tasks
  from pe_spectral.nn import model as model_lib
  from pe_spectral.training import runner
  run = runner.load_run(wd)
  rc, params = run.rc, run.states["params"]
  train_len = rc.task.seq_len
  test = tasks.load_corpus(rc.task.corpus).test
  rotary = "rotary" in rc.model.encoding.kinds
  variants = ["none"] + ([s for s in scalings if s != "none"] if rotary else [])
  graph = lambda cfg: jax.eval_shape(lambda: model_lib.init_model(cfg, jax.random.key(0)))[0]
  table, by_position = {}, {}
  for scaling in variants:
    table[scaling], by_position[scaling] = [], {}
    for f in factors:
      n = int(round(f * train_len))
      t0 = time.time()
      row = {"factor": f, "seq_len": n}
      try:
        windows = language.test_windows(test, n, tokens)
        cfg = extrapolation.eval_model_config(rc.model, n, train_len, scaling)
        nll = language.position_nll(graph(cfg), params, windows)
        bpb = language.bits_per_byte(nll)
        mean, lo, hi = stats.bootstrap_mean_ci(bpb)
        row.update(windows=int(windows.shape[0]), bits_per_byte=bpb.tolist(), mean=mean,
                   ci95=[lo, hi], error=None)
        by_position[scaling][str(n)] = (nll.mean(0) / language.LN2).round(5).tolist()
        msg = f"{mean:.3f} [{lo:.3f}, {hi:.3f}] bits/byte on {windows.shape[0]} windows"
      except ValueError as e:  # beyond a learned table, a split shorter than a window
        row.update(windows=None, bits_per_byte=None, mean=None, ci95=None,
                   error=str(e).splitlines()[0])
        msg = f"not evaluated: {row['error']}"
      table[scaling].append(row)
      log(f"[{os.path.relpath(wd)}] {scaling:>6} length {n} ({f:g}x): {msg} "
          f"({time.time() - t0:.1f} s)")
  out = {"workdir": os.path.abspath(wd), "step": run.step, "pe": rc.model.pe,
         "task": rc.task.name, "preset": rc.preset, "seeds": run.config["seeds"],
         "train_len": train_len, "faithful": False,
         "corpus": run.config.get("corpus"),
         "windows": "disjoint windows of the test split, evenly spread; every position "
                    "scored (position 0 without context)",
         "bits_per_byte": table, "loss_by_position": by_position}
  if trials:
    lengths = [int(round(f * train_len)) for f in factors
               if f * train_len >= language.passkey_min_length()]
    out["passkey"] = language.passkey_accuracy(
        run.steps.graphdef, params, lengths, depths, trials=trials,
        notify=lambda m: log(f"[{os.path.relpath(wd)}] {m}"))
  return out


def _main_lm(workdirs, log) -> int:
  """``main`` for language-model workdirs."""
  from pe_spectral.analysis import plotting
  from pe_spectral.training import runner
  factors = (_factors(FLAGS.factors) if FLAGS["factors"].present else LM_FACTORS)
  if FLAGS.tokens < 1 or FLAGS.passkey_trials < 0:
    raise ValueError("--tokens must be >= 1 and --passkey_trials >= 0")
  try:
    depths = [float(d) for d in FLAGS.passkey_depths]
  except ValueError:
    raise ValueError(f"--passkey_depths must be numbers, got "
                     f"{','.join(FLAGS.passkey_depths)!r}") from None
  if any(not 0 <= d <= 1 for d in depths):
    raise ValueError("--passkey_depths must lie in [0, 1]")
  bad = [s for s in FLAGS.lm_scalings if s not in positional.ROPE_SCALINGS]
  if bad:
    raise ValueError(f"--lm_scalings: unknown {', '.join(bad)}; valid: "
                     f"{', '.join(positional.ROPE_SCALINGS)}")
  results = []
  for wd in workdirs:
    res = evaluate_lm(wd, factors, tokens=FLAGS.tokens, scalings=FLAGS.lm_scalings,
                      depths=depths, trials=FLAGS.passkey_trials, log=log)
    runner.write_json(os.path.join(wd, "lengths.json"), res)
    plotting.bits_per_byte_curves([res], os.path.join(wd, "lengths.png"))
    plotting.loss_by_position(res, os.path.join(wd, "loss_by_position.png"))
    if "passkey" in res and res["passkey"]["lengths"]:
      plotting.passkey_heatmap(res, os.path.join(wd, "passkey.png"))
    results.append(res)
  if FLAGS.out:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    plotting.bits_per_byte_curves(results, FLAGS.out)
  print(f"{'run (bits per byte)':<40} " + " ".join(f"{f:>7g}x" for f in factors))
  for res in results:
    for scaling, rows in res["bits_per_byte"].items():
      cells = [" " * 5 + "n/a" if r["mean"] is None else f"{r['mean']:8.3f}" for r in rows]
      name = os.path.relpath(res["workdir"]) + ("" if scaling == "none" else f" +{scaling}")
      print(f"{name:<40} " + " ".join(cells))
    if "passkey" in res and res["passkey"]["lengths"]:
      import numpy as np
      acc = np.asarray(res["passkey"]["accuracy"]).mean((0, 2))
      print(f"{'':<40} passkey " + ", ".join(
          f"{n}: {100 * a:.0f}%" for n, a in zip(res["passkey"]["lengths"], acc)))
  return 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)
  if not FLAGS.workdir:
    print("error: --workdir is required (one or more finished sweep workdirs)",
          file=sys.stderr)
    return 2
  _, err = cli.checked_workdirs(FLAGS.workdir)
  if err is not None:
    print(f"error: {err}", file=sys.stderr)
    return 2
  from pe_spectral.training.workdir import BadFileError
  try:
    kinds = {_is_lm(wd) for wd in FLAGS.workdir}
  except (BadFileError, KeyError, TypeError) as e:
    print(f"error: {cli.error_line(e) if isinstance(e, BadFileError) else e!r}",
          file=sys.stderr)
    return 2
  if len(kinds) > 1:
    print("error: --workdir mixes language models and classifiers; evaluate them apart",
          file=sys.stderr)
    return 2
  if kinds == {True}:
    from pe_spectral.training import runner
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    try:
      return _main_lm(FLAGS.workdir, log)
    except (ValueError, runner.CheckpointError, runner.BadFileError) as e:
      print(f"error: {cli.error_line(e)}", file=sys.stderr)
      return 2
  try:
    factors = _factors(FLAGS.factors)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if FLAGS.examples < 1 or FLAGS.shift < 0:
    print("error: --examples must be >= 1 and --shift >= 0", file=sys.stderr)
    return 2
  from pe_spectral.analysis import plotting
  from pe_spectral.training import runner
  log = lambda msg: print(msg, file=sys.stderr, flush=True)
  name = output_name(FLAGS.rope_scaling, FLAGS.shift)
  results = []
  for wd in FLAGS.workdir:
    try:
      res = evaluate_lengths(wd, factors, examples=FLAGS.examples, shift=FLAGS.shift,
                             rope_scaling=FLAGS.rope_scaling, log=log)
    except (ValueError, runner.CheckpointError, runner.BadFileError) as e:
      print(f"error: {wd}: {cli.error_line(e)}", file=sys.stderr)
      return 2
    runner.write_json(os.path.join(wd, name + ".json"), res)
    plotting.length_curves([res], os.path.join(wd, name + ".png"))
    results.append(res)
  if FLAGS.out:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    plotting.length_curves(results, FLAGS.out)
  print(f"{'run':<40} " + " ".join(f"{f:>7g}x" for f in factors))
  for res in results:
    cells = [" " * 5 + "n/a" if r["mean"] is None else f"{100 * r['mean']:7.2f}%"
             for r in res["lengths"]]
    print(f"{os.path.relpath(res['workdir']):<40} " + " ".join(cells))
  return 0


if __name__ == "__main__":
  cli.run(main)

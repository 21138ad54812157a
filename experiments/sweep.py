r"""Multi-seed training sweep: all seeds of a PE in one compiled, vmapped program.

  python -m experiments.sweep --pe=rope --seeds=8
  python -m experiments.sweep --pe=nope,rope,alibi --task=count --preset=cpu
  python -m experiments.sweep --pe=partial_rope --rope_heads=1,2 --faithful

Each (PE, rope_heads) pair runs one after another into its own workdir
(default ``runs/<task>/<pe>[-k<rope_heads>][-faithful][-<preset>][-<field><value>...]``,
``pe_spectral.training.config.RunSpec.run_id``: the ``cpu`` preset has no suffix, and
each flag or ``--config.*`` override that changes what is trained adds its
field and value). Rerunning a command resumes from the last
checkpoint; a finished run just prints its summary. Progress goes to stderr,
the final table to stdout.
"""
from __future__ import annotations

if __name__ == "__main__":  # a Ctrl-C while no run trains (the imports: seconds): one line
  import os as _os
  import signal as _signal

  def _ctrl_c_at_start(signum, frame):
    _os.write(2, b"\ninterrupted while no run was training: nothing was being written "
                 b"(a finished run is saved; rerun the same command for the rest)\n")
    _os._exit(130)
  _signal.signal(_signal.SIGINT, _ctrl_c_at_start)  # the run's own handler replaces it

import errno
import importlib
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

from absl import app, flags, logging

from experiments import cli
from pe_spectral.data import corpus, tasks
from pe_spectral.pe import encodings
from pe_spectral.runtime.errors import RunError
from pe_spectral.runtime.timefmt import minutes_seconds
from pe_spectral.training import config as configs

FLAGS = flags.FLAGS
flags.DEFINE_string("pe", "rope", "PE name or comma list; one of: "
                    + ", ".join(encodings.names()))
flags.DEFINE_enum("task", "distance", list(tasks.TASKS),
                  "Synthetic task: the paper's distance and count, or Ruoss et al.'s "
                  "parity_check, even_pairs, cycle_navigation, modular_arithmetic "
                  "(trained on lengths 1..seq_len); or lm: a causal byte-level language "
                  "model on real text (--data; docs/language.md).")
flags.DEFINE_string("data", None,
                    "--task=lm: the corpus: a text file, a directory or a glob, or "
                    "hf:NAME[:CONFIG] (a Hugging Face dataset; needs the datasets library). "
                    "Default: this Python's standard library source, split by file. "
                    "Sets --config.task.corpus.")
flags.DEFINE_integer("seeds", 8, "Number of seeds trained together (vmapped).")
flags.DEFINE_integer("seed", 0, "First seed; seeds are seed..seed+seeds-1.")
flags.DEFINE_integer("data_seed", 0, "Dataset / trigger-word seed. Sets --config.task.data_seed.")
flags.DEFINE_string("preset", "cpu",
                    "Sizes: smoke (tests), cpu (default, minutes), paper (GPU), or one a "
                    "--presets_from module registers (docs/presets.md).")
flags.DEFINE_bool("tensorboard", True,
                  "Also write TensorBoard event files in the workdir (<workdir>/tb/, one "
                  "directory per seed and one for the mean) when tensorboardX is installed.")
flags.DEFINE_list("presets_from", [],
                  "Modules to import first that register presets "
                  "(config.register_preset), e.g. studies.arxiv_2505_13027.presets "
                  "for the study's study, deposit and long.")
flags.DEFINE_string("pe_module", None,
                    "A module of your own that registers PEs (encodings.register): a dotted "
                    "name importable from here, or a .py file. Loaded before --pe is checked "
                    "and recorded in the run's config, so ablate, decompose and lengths load "
                    "it again (docs/encodings.md).")
flags.DEFINE_bool("faithful", False,
                  "The paper's architecture, loss and optimiser quirks "
                  "(docs/protocol.md).")
flags.DEFINE_string("rope_heads", None,
                    "partial_rope: heads with RoPE, an int or comma list. "
                    "Sets --config.model.pe_options.heads.")
flags.DEFINE_integer("epochs", None, "Override the preset's epochs. Sets --config.train.epochs.")
flags.DEFINE_integer("steps", None, "Override the total step count. Sets --config.train.steps.")
flags.DEFINE_integer("batch_size", None, "Override the preset's batch size. "
                     "Sets --config.train.batch_size.")
flags.DEFINE_float("learning_rate", None, "Override the preset's peak lr. "
                   "Sets --config.train.learning_rate.")
flags.DEFINE_integer("eval_every", None,
                     "Steps between evaluations and checkpoints (default: 1 epoch).")
flags.DEFINE_string("workdir", None, "Output directory (one PE / rope_heads only).")
flags.DEFINE_enum("alibi_slopes", None, ["standard", "paper"],
                  "ALiBi slopes: standard 2^(-8h/H) (clean default) or the paper's "
                  "exp(-h/H) (faithful default). Sets --config.model.pe_options.slopes.")
flags.DEFINE_integer("random_positions", None,
                     "Randomized positions (Ruoss et al. 2023): each batch's tokens get sorted "
                     "distinct positions drawn from [0, N), in training and evaluation; "
                     "N >= the preset's max_len (e.g. 4x it, to test at 4x the length). "
                     "Sets --config.model.random_positions.")
flags.DEFINE_integer("attention_block", None,
                     "Memory: the blockwise attention kernel with this many query rows per "
                     "block (keeps no [q, k] tensor for the backward pass; same numbers up "
                     "to float rounding). Default: the standard kernel.")
flags.DEFINE_enum("attention_impl", None, ["own", "jax", "xla", "cudnn"],
                  "Softmax attention: the project's kernel (own, the default) or "
                  "jax.nn.dot_product_attention (jax: JAX's choice; xla; cudnn: fused flash "
                  "attention on a GPU). The library's serves PEs whose logits are q.k plus a "
                  "bias and has no dropout on the probabilities (set model.dropout=0).")
flags.DEFINE_bool("remat", None, "Memory: recompute each block in the backward pass "
                  "instead of keeping its activations (default off).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                  "Compute dtype. bfloat16: mixed precision (float32 parameters, optimiser, "
                  "softmax and loss; bfloat16 activations), for memory and speed on a GPU/TPU.")
flags.DEFINE_bool("resume", True, "Resume from the workdir's last checkpoint.")
flags.DEFINE_string("seed_group", None,
                    "Vmap this many seeds at a time; groups run one after another in "
                    "the same compiled program (single device; same results). 0: all "
                    "seeds in one vmap. auto: the widest group whose training chunk "
                    "fits the device's memory (compiles the candidates; prints the "
                    "choice). Default: 1 on a CPU backend (faster there, "
                    "benchmarks/README.md), auto on GPU/TPU.")
cli.define_memory_flags("With --seed_group=auto", "training")
flags.DEFINE_integer("record_spectra", 0,
                     "If > 0: at each eval, record per-layer/head logit spectra on "
                     "this many fixed test examples into spectra.jsonl.")
flags.DEFINE_integer("record_curvature", 0,
                     "If > 0, at each evaluation record the training loss's curvature "
                     "(top Hessian eigenvalue, Adam-preconditioned sharpness, "
                     "gradient norm) on this many fixed training examples "
                     "into curvature.jsonl.")
flags.DEFINE_float("preempt_grace", 30.0,
                   "Seconds a SIGTERM leaves before SIGKILL (SLURM's KillWait, a cloud's "
                   "preemption notice): the run saves at the end of the chunk in flight "
                   "if that comes in time, else it exits before the grace ends, keeping "
                   "its last saved checkpoint. 0: always wait for the chunk. One process "
                   "only (with --distributed JAX's preemption service decides).")
flags.DEFINE_bool("distributed", False,
                  "Call jax.distributed.initialize() first (multi-host: TPU pod "
                  "slices and SLURM are auto-detected; run the same command on "
                  "every host). Only process 0 writes files.")
flags.DEFINE_string("coordinator_address", None,
                    "host:port of process 0 (with --distributed, when not "
                    "auto-detected).")
flags.DEFINE_integer("num_processes", None, "Total processes (with --distributed).")
flags.DEFINE_integer("process_id", None, "This process's id (with --distributed).")


# --config.<section>.<field>: any other config field (experiments.cli)
cli.define_config_flags()


class UsageError(ValueError):
  pass


def _int_list(text: str, name: str) -> list[int]:
  try:
    return [int(t) for t in text.split(",") if t.strip()]
  except ValueError:
    raise UsageError(f"--{name} must be an int or comma list of ints, got {text!r}") from None


def plan_runs():
  """Validates every flag and returns [(RunConfig, workdir)] before any work."""
  if not FLAGS.preempt_grace >= 0:
    raise UsageError(f"--preempt_grace must be >= 0 seconds, got {FLAGS.preempt_grace}")
  for module in FLAGS.presets_from:
    try:
      importlib.import_module(module)
    except ImportError as e:
      raise UsageError(f"--presets_from: cannot import {module!r} ({e})") from None
  if FLAGS.preset not in configs.PRESET_NAMES:
    raise UsageError(f"unknown --preset {FLAGS.preset!r}; valid: "
                     f"{', '.join(configs.PRESET_NAMES)}"
                     + ("" if FLAGS.presets_from else
                        " (a study's presets need --presets_from)"))
  own_pes = ()
  if FLAGS.pe_module:
    module = FLAGS.pe_module
    if module.endswith(".py") or os.sep in module:
      module = os.path.abspath(module)  # recorded: analyses may run from elsewhere
    try:
      own_pes = encodings.load_module(module)
    except ValueError as e:
      raise UsageError(f"--pe_module: {e}") from None
  pes = [p.strip() for p in FLAGS.pe.split(",") if p.strip()]
  if not pes:
    raise UsageError("--pe is empty")
  for p in pes:
    if p not in encodings.REGISTRY:
      raise UsageError(f"unknown --pe {p!r}; valid: {', '.join(encodings.names())}")
  if FLAGS.seeds < 1:
    raise UsageError(f"--seeds must be >= 1, got {FLAGS.seeds}")
  if FLAGS.seed < 0 or FLAGS.data_seed < 0:
    raise UsageError("--seed and --data_seed must be >= 0")
  for name in ("epochs", "steps", "batch_size", "eval_every"):
    val = getattr(FLAGS, name)
    if val is not None and val < 1:
      raise UsageError(f"--{name} must be >= 1, got {val}")
  if FLAGS.data is not None and FLAGS.task != "lm":
    raise UsageError(f"--data names a corpus for --task=lm, not --task={FLAGS.task}")
  group = parse_seed_group(FLAGS.seed_group)
  if isinstance(group, int) and group and FLAGS.seeds % group:
    raise UsageError(f"--seed_group {group} must divide --seeds {FLAGS.seeds}")
  if err := cli.memory_flags_error(FLAGS.memory_gib, FLAGS.memory_fraction):
    raise UsageError(err)
  if FLAGS.record_spectra < 0:
    raise UsageError("--record_spectra must be >= 0")
  if FLAGS.record_curvature < 0:
    raise UsageError("--record_curvature must be >= 0")
  if FLAGS.learning_rate is not None and not (math.isfinite(FLAGS.learning_rate)
                                               and FLAGS.learning_rate > 0):
    raise UsageError(f"--learning_rate must be a finite number > 0, got {FLAGS.learning_rate}")
  try:
    overrides = cli.config_overrides()
  except app.UsageError as e:
    raise UsageError(str(e)) from None
  heads = [None]
  takes = lambda pe, flag: encodings.short_option(pe, flag) is not None  # the PE's options
  for option in encodings.SHORTCUT_OPTIONS:
    if getattr(FLAGS, option) is not None and not any(takes(p, option) for p in pes):
      owners = [p for p in encodings.names() if takes(p, option)]
      raise UsageError(f"--{option} only applies to --pe={' or '.join(owners)}")
  if FLAGS.rope_heads is not None:
    heads = _int_list(FLAGS.rope_heads, "rope_heads")
  runs = []
  for pe in pes:
    for k in (heads if takes(pe, "rope_heads") else [None]):
      if k is None and takes(pe, "rope_heads"):  # the default is in the name too
        k = encodings.PartialRopeOptions().heads
      settings = {f"{section}.{field}": value for section, fields in overrides.items()
                  for field, value in fields.items()}
      settings.update({
          "model.pe_options.heads": k,
          "model.pe_options.slopes": FLAGS.alibi_slopes if takes(pe, "alibi_slopes") else None,
          "model.random_positions": FLAGS.random_positions,
          "task.data_seed": FLAGS.data_seed or None, "task.corpus": FLAGS.data,
          "train.epochs": FLAGS.epochs,
          "train.steps": FLAGS.steps, "train.batch_size": FLAGS.batch_size,
          "train.learning_rate": FLAGS.learning_rate})
      try:
        spec = configs.RunSpec.of(FLAGS.task, pe, preset=FLAGS.preset,
                                  faithful=FLAGS.faithful, settings=settings)
        rc = spec.build(attention_block=FLAGS.attention_block, remat=FLAGS.remat,
                        dtype=FLAGS.dtype, attention_impl=FLAGS.attention_impl,
                        pe_module=module if pe in own_pes else None)
      except ValueError as e:
        raise UsageError(f"invalid configuration for --pe={pe}: {e}") from None
      if rc.task.is_lm:  # the corpus read once here: a bad one fails before any work
        try:
          tasks.check_corpus(rc.task)
        except corpus.CorpusError as e:
          raise UsageError(f"--data: {e}") from None
      runs.append((rc, FLAGS.workdir or os.path.join("runs", spec.run_id())))
  if FLAGS.workdir and len(runs) > 1:
    raise UsageError("--workdir names one run; drop it to use one default "
                     "workdir per PE")
  for _, workdir in runs:
    _check_writable(workdir)
  return runs


def _check_writable(workdir: str) -> None:
  """Fails early for an unwritable workdir, leaving nothing behind."""
  probe = os.path.abspath(workdir)
  while not os.path.exists(probe):
    parent = os.path.dirname(probe)
    if parent == probe:
      break
    probe = parent
  try:
    # Permission bits do not stop root: really create (and remove) a directory.
    shutil.rmtree(tempfile.mkdtemp(prefix=".write-probe-", dir=probe))
  except OSError as e:
    raise UsageError(f"--workdir {workdir!r} is not writable ({probe}: "
                     f"{e.strerror or e})") from None


def _init_distributed() -> None:
  import jax
  kwargs = {k: v for k, v in dict(coordinator_address=FLAGS.coordinator_address,
                                    num_processes=FLAGS.num_processes,
                                    process_id=FLAGS.process_id).items()
            if v is not None}
  # CPU processes need a collectives backend for cross-process gathers; the
  # option only concerns the CPU client (it must be set before backends start).
  try:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  except Exception:  # pragma: no cover - option absent in this jax
    pass
  jax.distributed.initialize(**kwargs)
  print(f"process {jax.process_index()}/{jax.process_count()}: "
        f"{jax.local_device_count()} local of {jax.device_count()} devices",
        file=sys.stderr, flush=True)


def _progress(tag: str, stop=None, lm: bool = False):
  def show(p: dict) -> None:
    eta = p["eta_s"]
    comp = (f"  (compiled in {p['compile_s']:.0f} s, not counted)"
            if p.get("compile_s") else "")
    held_out = (f"valid {p['test_loss_mean'] / math.log(2):.3f} bits/byte  "
                f"next-byte acc {100 * p['test_accuracy_mean']:.2f}%"
                if lm else f"test acc {100 * p['test_accuracy_mean']:.2f}%")
    print(f"[{tag}] step {p['step']}/{p['total']}  loss {p['loss_mean']:.4f} ± "
          f"{p['loss_std']:.4f}  {held_out}  "
          f"train acc {100 * p['train_accuracy_mean']:.2f}%  "
          f"{p['steps_per_s']:.2f} steps/s  ETA {minutes_seconds(eta)}{comp}",
          file=sys.stderr, flush=True)
    if stop is not None:
      stop.chunk_measured(p["chunk_s"])
  return show


def _notify(tag: str):
  return lambda msg: print(f"[{tag}] {msg}", file=sys.stderr, flush=True)


# The exit status of a run stopped by SIGTERM after saving: 128 + SIGTERM,
# what a shell and every scheduler already report for a process that SIGTERM
# ended. A job script (launch/slurm.sbatch) requeues on it; a Kubernetes Job
# can match it in a podFailurePolicy (onExitCodes: [143], action: Ignore).
PREEMPTED_EXIT = 128 + signal.SIGTERM


class _Stop:
  """Stops a run at a checkpoint when asked.

  Ctrl-C (SIGINT): says at once when the run will stop, then finishes the
  current chunk, its evaluation and its checkpoint (nothing is lost); a second
  Ctrl-C stops at once (resume then starts from the last checkpoint saved).

  SIGTERM (a scheduler's preemption notice, with a grace period before
  SIGKILL): the same stop at the end of the compiled call in flight -- the
  nearest step boundary there is; the runner splits an evaluation interval
  into calls of a third of the grace (``RunOptions.call_seconds``), and a stop
  between them saves there -- then reported as preempted. With several
  processes (``distributed``), JAX's preemption service catches the signal
  instead, and every process stops at the chunk its sync point names
  (``multihost_utils.reached_preemption_sync_point``), so that all save the
  same step. A first Ctrl-C there takes the same path
  (the process sends itself the SIGTERM that JAX's service listens for): a
  process that stopped on its own would leave the others waiting in a
  collective.

  A call can still outlast the grace a scheduler leaves after SIGTERM
  (``grace`` seconds; SLURM's default is 30): a session's first call, whose
  pace is not known yet, or its compilation. Then the process exits before
  the grace ends (a watchdog thread, told of the signal through
  ``signal.set_wakeup_fd`` even while the main thread is inside XLA), keeping
  the last checkpoint it saved, as the SIGKILL would, but with the preempted
  exit status and a line that says so; the resume is the one after any kill.

  The runner waits for the device by polling, so the handlers run at once."""

  def __init__(self, distributed: bool = False, grace: float = 0.0, tag: str = "",
               ckpt_dir: str = ""):
    self.requested = False     # Ctrl-C
    self.preempted = False     # SIGTERM, or the processes' preemption sync point
    self.saved_step = None     # the last checkpoint whose save started
    self._ckpt_dir = ckpt_dir  # where finished saves are step-named folders
    self._distributed = distributed
    self._grace, self._tag = grace, tag
    self._armed = threading.Event()  # the watchdog's timer started
    self._wake = None                # (reader, writer) of the wakeup socket pair
    self._chunks = 0           # chunks ended: the sync point's step ids
    self._chunk_s = None       # the last chunk's measured length
    self._chunk_start = None   # when the current chunk began (after a progress line)

  def chunk_measured(self, seconds: float) -> None:
    self._chunk_s, self._chunk_start = seconds, time.time()

  def __enter__(self):
    self._previous = {signal.SIGINT: signal.signal(signal.SIGINT, self._ctrl_c)}
    if not self._distributed:
      self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._sigterm)
      if self._grace > 0:
        # The C-level handler writes each signal's number here at once, from
        # whatever the main thread is doing (a compilation holds it for
        # seconds before the Python handler can run): the watchdog reads it.
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._wake = (reader, writer)
        threading.Thread(target=self._watch, args=(reader,), daemon=True).start()
    return self

  def _watch(self, reader) -> None:
    while True:
      try:
        got = reader.recv(64)
      except OSError:
        return
      if not got:  # closed: the run is over
        return
      if int(signal.SIGTERM) in got:
        self._arm()
        return

  def _arm(self) -> None:
    """Starts the grace's timer (once)."""
    if not self._armed.is_set():
      self._armed.set()
      timer = threading.Timer(self._grace - min(1.0, self._grace / 4), self._out_of_time)
      timer.daemon = True
      timer.start()

  def _when(self) -> str:
    if self._chunk_s is None:
      return "after the first chunk (its length is not known yet; it includes compiling)"
    left = max(self._chunk_s - (time.time() - self._chunk_start), 0.0)
    return f"after the current chunk, its evaluation and checkpoint, in about {left:.0f} s"

  def _ctrl_c(self, signum, frame):
    if self.requested:
      signal.signal(signal.SIGINT, self._previous[signal.SIGINT])
      raise KeyboardInterrupt
    self.requested = True
    if self._distributed:  # every process stops at the step the sync point names
      os.kill(os.getpid(), signal.SIGTERM)
    print(f"\nCtrl-C: stopping {self._when()}; Ctrl-C again stops at once (resuming then "
          "starts from the last saved checkpoint)", file=sys.stderr, flush=True)

  def _sigterm(self, signum, frame):
    if not self.preempted:
      self.preempted = True
      if self._grace > 0:  # exit before the SIGKILL, whatever the call does
        self._arm()  # (the watchdog has, unless the signal came another way)
        when = (f"after the compiled call in flight, within {self._grace:g} s "
                "(--preempt_grace)")
      else:
        when = self._when()
      print(f"\nSIGTERM: saving and stopping {when}", file=sys.stderr, flush=True)

  def kept(self) -> str:
    """Which checkpoint a resume would start from, for the watchdog's line:
    the newest finished save (orbax renames a save's folder to its step when
    the save is complete), and a save that had started but not finished."""
    try:
      done = max((int(n) for n in os.listdir(self._ckpt_dir) if n.isdigit()), default=None)
    except OSError:
      done = None
    kept = "none yet" if done is None else f"step {done}"
    if self.saved_step is not None and (done is None or self.saved_step > done):
      kept += f"; the save of step {self.saved_step} had not finished"
    return kept

  def _out_of_time(self) -> None:
    """The watchdog: the chunk in flight did not end within the grace."""
    kept = self.kept()
    print(f"preempted: the chunk in flight would end after the {self._grace:.0f} s grace; "
          f"stopped now with the last saved checkpoint ({kept}); rerun the same command "
          f"to resume {self._tag}", file=sys.stderr, flush=True)
    os._exit(PREEMPTED_EXIT)

  def checkpoint_started(self, step: int) -> None:
    self.saved_step = step

  def should_stop(self) -> bool:
    """Polled by the runner after each chunk's checkpoint, on every process."""
    self._chunks += 1
    if self._distributed:  # never on one's own: only where the sync point says
      if not self.preempted:
        from jax.experimental import multihost_utils
        self.preempted = multihost_utils.reached_preemption_sync_point(self._chunks)
      return self.preempted
    return self.requested or self.preempted

  def __exit__(self, *exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    if self._wake is not None:
      signal.set_wakeup_fd(self._previous_wakeup)
      for end in self._wake:
        end.close()


def parse_seed_group(flag):
  """``--seed_group``'s value: None (unset), ``"auto"`` or an int >= 0."""
  if flag is None or str(flag).strip().lower() == "auto":
    return None if flag is None else "auto"
  try:
    value = int(flag)
  except ValueError:
    raise UsageError(f"--seed_group must be an int >= 0 or auto, got {flag!r}") from None
  if value < 0:
    raise UsageError(f"--seed_group must be >= 0, got {value}")
  return value


def resolve_seed_group(flag):
  """The runner's ``seed_group``: the flag, with 0 = one vmap over all seeds,
  ``auto`` = the widest group that fits the device, and unset = 1 on a CPU
  backend (there one seed already fills the cores, and a wide vmap turns every
  matmul into a slower batched one), ``auto`` elsewhere."""
  flag = parse_seed_group(flag)
  if flag is None:
    import jax
    return 1 if jax.default_backend() == "cpu" else "auto"
  return flag or None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  try:
    runs = plan_runs()
  except UsageError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if FLAGS.distributed:
    _init_distributed()
  elif FLAGS.coordinator_address or FLAGS.num_processes or FLAGS.process_id is not None:
    print("error: --coordinator_address/--num_processes/--process_id need "
          "--distributed", file=sys.stderr)
    return 2
  from pe_spectral.training import runner  # noqa: E402  (imports JAX)
  seeds = list(range(FLAGS.seed, FLAGS.seed + FLAGS.seeds))
  import jax
  quiet = jax.process_index() != 0
  from pe_spectral.training import events  # noqa: E402
  tensorboard = FLAGS.tensorboard and events.available()
  if FLAGS.tensorboard and not tensorboard and not quiet:
    print(f"note: no TensorBoard event files without tensorboardX ({events.INSTALL_HINT}); "
          "training as usual", file=sys.stderr)
  rows = []
  for rc, workdir in runs:
    tag = os.path.relpath(workdir)
    print(f"[{tag}] {rc.model.pe} on {rc.task.name}, preset {rc.preset}, "
          f"{len(seeds)} seeds, faithful={rc.model.faithful}", file=sys.stderr,
          flush=True)
    try:
      with _Stop(distributed=FLAGS.distributed, grace=FLAGS.preempt_grace, tag=tag,
                 ckpt_dir=os.path.join(workdir, "ckpt")) as stop:
        s = runner.run(
            rc, seeds, workdir,
            runner.RunOptions(eval_every=FLAGS.eval_every, resume=FLAGS.resume,
                              record_spectra=FLAGS.record_spectra,
                              record_curvature=FLAGS.record_curvature,
                              seed_group=resolve_seed_group(FLAGS.seed_group),
                              memory_gib=FLAGS.memory_gib,
                              memory_fraction=FLAGS.memory_fraction,
                              call_seconds=(FLAGS.preempt_grace / 3
                                            if FLAGS.preempt_grace > 0 else None)),
            runner.Hooks(progress=None if quiet else _progress(tag, stop, rc.task.is_lm),
                         notify=(lambda msg: None) if quiet else _notify(tag),
                         should_stop=stop.should_stop,
                         on_checkpoint=stop.checkpoint_started),
            recorders=[events.TensorBoardRecorder()] if tensorboard else [])
    except RunError as e:  # one line: what went wrong, and what to do
      print(f"error: {cli.error_line(e)}", file=sys.stderr)
      return 1
    except OSError as e:  # a metrics or summary file that did not fit
      if e.errno not in (errno.ENOSPC, errno.EDQUOT):
        raise
      free = shutil.disk_usage(workdir).free / 2**20
      print(f"error: no space left writing {e.filename or workdir} ({free:.1f} MiB free); "
            "free some space, then rerun the same command to resume", file=sys.stderr)
      return 1
    except runner.Interrupted as e:
      if stop.preempted and not stop.requested:
        if not quiet:
          print(f"preempted at step {e.step}: saved; rerun the same command to resume {tag}",
                file=sys.stderr, flush=True)
        if not FLAGS.distributed:  # saved and closed: the interpreter's teardown (up to
          sys.stdout.flush()       # a second on a loaded machine) is not the grace's to pay
          os._exit(PREEMPTED_EXIT)
        return PREEMPTED_EXIT
      print(f"interrupted at step {e.step}, checkpoint saved: rerun the same command "
            f"to resume {tag} from there", file=sys.stderr, flush=True)
      return 130
    except KeyboardInterrupt:
      print(f"\ninterrupted: rerun the same command to resume {tag} from its last "
            "saved checkpoint", file=sys.stderr, flush=True)
      # A second Ctrl-C stops at once: the chunk in flight is abandoned. A normal
      # exit would wait for it (the runtime finishes a running program before
      # the interpreter can end), so the process ends here; the files were
      # closed on the way out, and a cut-off save is removed on resume.
      sys.stdout.flush()
      os._exit(130)
    rows.append((tag, s))
  if quiet:
    return 0
  lm = [(tag, s) for tag, s in rows if "test_bits_per_byte" in s]
  if lm:  # language models: bits per byte on the validation windows, lower is better
    print(f"\n{'run':<34} {'bits/byte (mean ± std)':>22}  per-seed bits per byte (validation)")
    for tag, s in lm:
      per = " ".join(f"{b:.3f}" for b in s["test_bits_per_byte"])
      print(f"{tag:<34} {s['test_bits_per_byte_mean']:>12.3f} ± "
            f"{s['test_bits_per_byte_std']:<7.3f}  {per}  (unigram "
            f"{s['unigram_bits_per_byte']:.3f})")
    print("next: python -m experiments.lengths --workdir=<run> (bits per byte at longer "
          "contexts, loss against position)")
    return 0
  print(f"\n{'run':<34} {'test acc (mean ± std)':>22}  {'plateaued':>9}  "
        f"per-seed test accuracy (%)")
  for tag, s in rows:
    per = " ".join(f"{100 * a:.1f}" for a in s["test_accuracy"])
    pl = s.get("plateau", {}).get("per_seed")
    pl = "?" if pl is None else f"{sum(pl)}/{len(pl)}"
    print(f"{tag:<34} {100 * s['test_accuracy_mean']:>12.2f} ± "
          f"{100 * s['test_accuracy_std']:<6.2f}  {pl:>9}  {per}")
  crit = rows[-1][1].get("plateau", {}).get("criterion") if rows else None
  if crit:
    print(f"plateaued: seeds whose {crit}")
  return 0


if __name__ == "__main__":
  cli.run(main)

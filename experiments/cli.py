"""The programs' command-line layer: ``absl.app.run`` with this project's exit
codes, the ``--config.*`` flags, and the flag names the library's errors map to
(the library never names a flag: :mod:`pe_spectral.runtime.errors`).

Every usage error exits 2 -- a flag absl cannot parse, an unknown flag, stray
arguments (``app.UsageError``) -- like the launchers' own flag checks; a run
that fails exits 1 and an interrupted one 130 (the launcher's own return
value). ``--help`` (and absl's other help flags) exits 0.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import jax
from absl import app, flags

from pe_spectral.runtime import gc_tuning, memory, xla_config
from pe_spectral.runtime.errors import Remedy, RunError
from pe_spectral.training import config

__all__ = ["run", "USAGE_EXIT", "HELP_FLAGS", "define_config_flags", "config_overrides",
           "checked_workdirs", "define_memory_flags", "memory_flags_error", "error_line",
           "REMEDY_HINTS", "sweep_args", "compile_cache_dir", "COMPILE_CACHE_OFF"]

USAGE_EXIT = 2
HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def checked_workdirs(value) -> tuple[list, "str | None"]:
  """The workdirs a ``--workdir`` flag names (a comma list, or a list flag's
  list) and the first one's problem (missing, no config.json), or None:
  analysis launchers refuse a bad one before loading anything."""
  if isinstance(value, (list, tuple)):
    wds = list(value)
  else:
    wds = [w.strip() for w in (value or "").split(",") if w.strip()] or [value]
  for wd in wds:
    if not config.is_workdir(wd):
      return wds, f"--workdir must be a sweep workdir with config.json, got {wd!r}"
  return wds, None


# What the caller of a failed run can do, in flags (pe_spectral.runtime.errors.Remedy).
REMEDY_HINTS = {
    Remedy.START_OVER: "pass --noresume to start it over",
    Remedy.OTHER_WORKDIR: "choose another --workdir",
    Remedy.START_OVER_OR_OTHER_WORKDIR: "pass --noresume to start it over or choose another "
                                        "--workdir",
    Remedy.LOWER_LEARNING_RATE: "a lower --learning_rate may help",
    Remedy.FREE_SPACE: "free some space (or choose another --workdir), then rerun the same "
                       "command to resume",
}


def error_line(e: Exception) -> str:
  """One line for a failed run: the library's reason and, for a
  :class:`~pe_spectral.runtime.errors.RunError`, its remedy in flags."""
  if isinstance(e, RunError) and e.remedy is not None:
    return f"{e.reason}; {REMEDY_HINTS[e.remedy]}"
  return str(e)


def _override_hint(section: str, name: str) -> str:
  """Why ``--config.<section>.<name>`` is not a flag to set, in flags."""
  argument = config.BUILD_ARGUMENTS.get((section, name))
  if argument is not None:  # each build() argument is a flag of the same name
    return f"use --{argument}"
  if (section, name) == ("model", "pe_options"):
    return "set its fields: --config.model.pe_options.<field>"
  return config.not_overridable_reason(section, name)


def define_config_flags(flag_values=None) -> None:
  """One string flag ``--config.<section>.<field>`` per config field, the JAX
  ecosystem's way
  (``ml_collections.config_flags``): e.g. ``--config.model.d_model=96``,
  ``--config.train.b2=0.99``, ``--config.model.relative_buckets=none``. Unset
  flags leave the preset's value."""
  from absl import flags
  fv = flags.FLAGS if flag_values is None else flag_values
  settable = config.overridable_fields()
  for (section, name), kind in config.config_fields().items():
    # a field with a short flag (or one that follows from others) is defined
    # too, so that setting it says what to use instead
    help_ = (f"Sets {section}.{name} ({kind}); default: the preset's."
             if (section, name) in settable else
             f"Not settable here: {_override_hint(section, name)}.")
    flags.DEFINE_string(f"config.{section}.{name}", None, help_, flag_values=fv)


def config_overrides(flag_values=None) -> dict:
  """``{section: {field: value}}`` of the ``--config.*`` flags given, typed
  (``config.parse_override``); ``app.UsageError`` names a bad one."""
  from absl import flags
  fv = flags.FLAGS if flag_values is None else flag_values
  out: dict = {}
  for (section, name) in config.config_fields():
    text = fv[f"config.{section}.{name}"].value
    if text is None:
      continue
    try:
      out.setdefault(section, {})[name] = config.parse_override(section, name, text)
    except config.OverrideError as e:
      flag = f"--config.{e.section}.{e.name}"
      if (e.section, e.name) in config.BUILD_ARGUMENTS or (e.section, e.name) == (
          "model", "pe_options"):
        raise app.UsageError(f"{flag} cannot be set: {_override_hint(e.section, e.name)}") \
            from None
      raise app.UsageError(f"--config.{e}") from None
  return out


def _flag_text(value) -> str:
  if isinstance(value, bool):
    return "true" if value else "false"
  return repr(value) if isinstance(value, float) else str(value)


def sweep_args(spec: config.RunSpec) -> list[str]:
  """The ``experiments.sweep`` flags that train ``spec``: a field a build()
  argument sets by that argument's flag (``--rope_heads=1``, ``--epochs=40``),
  any other by ``--config.<section>.<field>``. The sweep reads them back into
  an equal spec (a study's plan runs its runs so)."""
  args = [f"--preset={spec.preset}", f"--task={spec.task}", f"--pe={spec.pe}"]
  if spec.faithful:
    args.append("--faithful")
  for section, field, value in spec.settings:
    argument = config.BUILD_ARGUMENTS.get((section, field))
    flag = argument or f"config.{section}.{field}"
    args.append(f"--{flag}={_flag_text(value)}")
  return args


def define_memory_flags(when: str, program: str) -> None:
  """``--memory_gib`` and ``--memory_fraction``: the memory budget
  (``memory.memory_budget``) that ``program`` sizes itself against ``when``
  (e.g. "With --seed_group=auto")."""
  from absl import flags
  # listed by --help with the launcher's own flags (absl names __main__ by argv[0])
  main = dict(module_name=sys.argv[0])
  flags.DEFINE_float("memory_gib", None, f"{when}: the memory {program} may use (default: "
                     "90% of the device's free memory; on a shared GPU say how much is yours).",
                     **main)
  flags.DEFINE_float("memory_fraction", 1.0, f"{when} and no --memory_gib: the share of the "
                     "device this process may use (several processes on one GPU each see all "
                     "of it; studies.arxiv_2505_13027.plan --workers=N passes 1/N).", **main)


def memory_flags_error(memory_gib, fraction) -> "str | None":
  """What is wrong with a memory budget's ``--memory_gib`` / ``--memory_fraction``
  values, or None."""
  err = memory.memory_budget_error(memory_gib, fraction)
  return None if err is None else f"--{err}"  # the library names its arguments as the flags


# --compile_cache values that turn JAX's persistent compilation cache off
COMPILE_CACHE_OFF = ("", "off", "none", "0", "false")


def compile_cache_dir(flag_value: Optional[str], environ=None) -> Optional[str]:
  """The folder of JAX's persistent compilation cache for a program, or None
  (off): ``--compile_cache`` if given (an off value: None), else
  ``$JAX_COMPILATION_CACHE_DIR`` (JAX's own variable), else
  ``$PE_SPECTRAL_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/pe-spectral/jax``
  (``~/.cache/pe-spectral/jax``). A cached program is the same compiled code:
  the cache only skips the compiler on a rerun of the same program (same
  shapes, flags, jax and device), e.g. a resumed sweep or another seed count's
  second run (measured in benchmarks/README.md)."""
  env = os.environ if environ is None else environ
  if flag_value is not None:
    return None if flag_value.strip().lower() in COMPILE_CACHE_OFF else \
        os.path.expanduser(flag_value)
  for name in ("JAX_COMPILATION_CACHE_DIR", "PE_SPECTRAL_COMPILE_CACHE"):
    if env.get(name) is not None:
      value = env[name]
      return None if value.strip().lower() in COMPILE_CACHE_OFF else os.path.expanduser(value)
  base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "pe-spectral", "jax")


def _use_compile_cache(flag_value: Optional[str]) -> None:
  """Turns JAX's persistent compilation cache on in :func:`compile_cache_dir`'s
  folder (before the program compiles anything); a folder that cannot be
  made is one line on stderr, and the program runs without the cache."""
  path = compile_cache_dir(flag_value)
  if path is None:
    jax.config.update("jax_enable_compilation_cache", False)
    return
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    print(f"compile cache off: cannot create {path} ({e.strerror or e})", file=sys.stderr)
    jax.config.update("jax_enable_compilation_cache", False)
    return
  jax.config.update("jax_compilation_cache_dir", path)


def run(main: Callable[[list], int], *, compile_cache: bool = True) -> None:
  """``app.run(main)``; absl's exit 1 for flag errors becomes 2, for help 0.

  The program's entry point: every program gets ``--xla_cpu_tuning`` (the
  measured-faster XLA:CPU flags, :func:`xla_config.tune_cpu`, set before
  ``main`` computes anything), the garbage collector's raised thresholds
  (:func:`gc_tuning.tune_gc`) and, with ``compile_cache``, ``--compile_cache``
  (JAX's persistent compilation cache: :func:`compile_cache_dir`; the
  benchmarks, which time compilation, go without)."""
  started = []
  if "xla_cpu_tuning" not in flags.FLAGS:
    flags.DEFINE_bool(
        "xla_cpu_tuning", True,
        "Run with the XLA:CPU flags measured faster for these models (pe_spectral/runtime/"
        "xla_config.py: YNN fusions off); false leaves XLA's defaults. No effect off the CPU.")
  if compile_cache and "compile_cache" not in flags.FLAGS:
    flags.DEFINE_string(
        "compile_cache", None,
        "Folder of JAX's persistent compilation cache (reruns of the same program skip "
        "the compiler; same compiled code). Default: $JAX_COMPILATION_CACHE_DIR, else "
        "$PE_SPECTRAL_COMPILE_CACHE, else ~/.cache/pe-spectral/jax. 'off' disables it.")

  def wrapped(argv):
    started.append(True)
    xla_config.tune_cpu(flags.FLAGS.xla_cpu_tuning)  # before anything computes
    gc_tuning.tune_gc()  # fewer collector passes while the program traces
    if compile_cache:
      _use_compile_cache(flags.FLAGS.compile_cache)
    try:
      return main(argv)
    except app.UsageError as e:
      print(f"error: {e}", file=sys.stderr)
      return USAGE_EXIT

  try:
    app.run(wrapped)
  except SystemExit as e:
    if started or e.code != 1:
      raise
    asked_help = any(a.split("=", 1)[0] in HELP_FLAGS for a in sys.argv[1:])
    raise SystemExit(0 if asked_help else USAGE_EXIT) from None

"""Runs several command lines of the project's programs in ONE process.

  python tests/cli_batch.py ANSWERS.json < cases.json

``cases.json`` is a JSON list of ``{"module": "experiments.sweep", "args": [...],
"cwd": "..."}``; ``ANSWERS.json`` gets a JSON list of ``{"returncode",
"stdout", "stderr"}``, one per case, as ``python -m MODULE ARGS`` run in
``cwd`` would give them. For the command lines that fail fast (a bad flag, a
missing file, a refused checkpoint), which the tests check for their exit
status and their one line: each would otherwise pay a fresh interpreter and
JAX's import (about 3 s on two cores) to print one line.

Each case starts from every flag's default (``FLAGS.unparse_flags()``) and
runs the program's ``main`` through ``experiments.cli.run``, exactly the path
``python -m MODULE`` takes after its imports; an exception that escapes is
exit 1 with its traceback on stderr, as the interpreter would print it.
"""
import contextlib
import importlib
import io
import json
import os
import sys
import traceback

from absl import flags

from experiments import cli

_DEFINED = set()


def run_one(module: str, args, cwd: str) -> dict:
  mod = importlib.import_module(module)
  if module not in _DEFINED:  # a program that defines its flags under __main__ (the plan)
    _DEFINED.add(module)
    if callable(getattr(mod, "define_flags", None)):
      mod.define_flags()
  out, err = io.StringIO(), io.StringIO()
  here = os.getcwd()
  flags.FLAGS.unparse_flags()
  sys.argv = [mod.__file__, *args]
  code = 0
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      os.chdir(cwd)
      cli.run(mod.main)
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - what the interpreter would print
      traceback.print_exc()
      code = 1
    finally:
      os.chdir(here)
  return {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> int:
  answers_path = sys.argv[1]  # read first: each case sets sys.argv
  cases = json.load(sys.stdin)
  modules = {c["module"] for c in cases}
  if len(modules) != 1:  # two programs may define the same flag (absl: one namespace)
    raise SystemExit(f"one program per batch, got {sorted(modules)}")
  answers = [run_one(c["module"], c.get("args", []), c.get("cwd", os.getcwd())) for c in cases]
  with open(answers_path, "w") as f:
    json.dump(answers, f)
  return 0


if __name__ == "__main__":
  sys.exit(main())

"""The layout's promises, checked by walking every import statement (those
inside functions too): the library never reaches up into the programs, the
benchmarks or a study, and the programs never reach into a study."""
import ast
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LAYERS = ("pe_spectral", "experiments", "benchmarks", "studies")


def _modules(package):
  """``{module name: path}`` of every ``.py`` file under ``package``."""
  out = {}
  for folder, _, files in os.walk(os.path.join(ROOT, package)):
    if "results" in os.path.relpath(folder, ROOT).split(os.sep):
      continue
    for f in files:
      if f.endswith(".py"):
        rel = os.path.relpath(os.path.join(folder, f), ROOT)[:-3].replace(os.sep, ".")
        out[rel.removesuffix(".__init__")] = os.path.join(folder, f)
  return out


def imports_of(path, module):
  """Every module an import statement of ``path`` names, relative ones resolved,
  with ``from pkg import name`` read as ``pkg.name`` (a submodule or a member)."""
  tree = ast.parse(open(path).read(), path)
  package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
      out.add(base)
      out.update(f"{base}.{a.name}" for a in node.names)
  return out


def _violations(package, forbidden):
  bad = []
  for module, path in sorted(_modules(package).items()):
    for name in sorted(imports_of(path, module)):
      if name.split(".")[0] in forbidden:
        bad.append(f"{module} imports {name}")
  return bad


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path):
  """The checker itself: an import hidden in a function, and a relative one,
  are both found (else the tests below could not fail)."""
  src = tmp_path / "m.py"
  src.write_text("import os\n\ndef f():\n  from studies.x import plan\n  from . import sib\n")
  got = imports_of(str(src), "pe_spectral.sub.m")
  assert {"os", "studies.x", "studies.x.plan", "pe_spectral.sub", "pe_spectral.sub.sib"} <= got


@pytest.mark.parametrize("package,forbidden", [
    ("pe_spectral", {"experiments", "benchmarks", "studies"}),
    ("experiments", {"benchmarks", "studies"}),
])
def test_no_upward_imports(package, forbidden):
  assert _violations(package, forbidden) == []


def test_every_layer_is_walked():
  """Each layer has modules (a moved folder would silently pass the test above)."""
  for package in LAYERS:
    assert _modules(package), package
  assert "studies.arxiv_2505_13027.claims" in _modules("studies")


@pytest.mark.parametrize("package", ["pe_spectral", "experiments", "studies"])
def test_modules_have_no_import_cycle(package):
  """A package's modules (the library's, the programs', a study's) import one
  another without a cycle, counting the imports inside functions too (so none
  of them can be hiding one)."""
  mods = _modules(package)
  graph = {m: {n for n in imports_of(p, m) if n in mods and n != m} for m, p in mods.items()}
  state = {}

  def visit(m, stack):
    state[m] = "open"
    for d in sorted(graph[m]):
      if state.get(d) == "open":
        raise AssertionError("import cycle: " + " -> ".join(stack + [m, d]))
      if d not in state:
        visit(d, stack + [m])
    state[m] = "done"
  for m in sorted(graph):
    if m not in state:
      visit(m, [])


def _program_flags():
  """Every flag the programs define (``flags.DEFINE_*("name", ...)``), and the
  ``--config.*`` family."""
  names = {"config"}
  for package in ("experiments", "benchmarks", "studies"):
    for path in _modules(package).values():
      for node in ast.walk(ast.parse(open(path).read(), path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("DEFINE_") and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
          names.add(node.args[0].value)
  return names


def test_the_library_names_no_flag():
  """No string in the library -- messages, help texts, docstrings -- names a
  program's flag (``--noresume``, ``--config.model.x``): the library speaks in
  its own arguments, and the programs map them to flags (experiments.cli)."""
  flags = _program_flags()
  assert {"pe", "noresume", "workdir", "memory_gib"} - {"noresume"} <= flags
  flags.add("noresume")  # absl's negation of --resume
  pattern = re.compile(r"--(" + "|".join(sorted(map(re.escape, flags), key=len,
                                                   reverse=True)) + r")\b")
  bad = []
  for module, path in sorted(_modules("pe_spectral").items()):
    source = open(path).read()
    for node in ast.walk(ast.parse(source, path)):
      if isinstance(node, ast.Constant) and isinstance(node.value, str):
        for m in pattern.finditer(node.value):
          bad.append(f"{module}:{node.lineno}: {m.group(0)}")
    for lineno, line in enumerate(source.splitlines(), 1):  # comments too
      if "#" in line:
        for m in pattern.finditer(line[line.index("#"):]):
          bad.append(f"{module}:{lineno} (comment): {m.group(0)}")
  assert bad == []


def _top_level_names(path):
  names = set()
  for node in ast.parse(open(path).read(), path).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
        names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split(".")[0] for a in node.names)
  return names


def test_every_from_import_of_the_project_resolves():
  """``from <project module> import name``: the module exists and ``name`` is
  one of its submodules or top-level names, in every file of the project (a
  moved module or a wrong line would otherwise fail only in a subprocess)."""
  mods = {}
  for package in LAYERS + ("tests",):
    mods.update(_modules(package))
  bad = []
  for module, path in sorted(mods.items()):
    for node in ast.walk(ast.parse(open(path).read(), path)):
      if not (isinstance(node, ast.ImportFrom) and node.module and not node.level):
        continue
      if node.module.split(".")[0] not in LAYERS:
        continue
      if node.module not in mods:
        bad.append(f"{module}:{node.lineno}: no module {node.module}")
        continue
      have = _top_level_names(mods[node.module])
      for a in node.names:
        if a.name != "*" and a.name not in have and f"{node.module}.{a.name}" not in mods:
          bad.append(f"{module}:{node.lineno}: {node.module} has no {a.name}")
  assert bad == []


# A library module that may import the project inside a function, and why
# (none today: xla_config, which a program calls before JAX starts, imports
# nothing of the project).
_LAZY_ON_PURPOSE: set = set()


@pytest.mark.parametrize("package", ["pe_spectral", "studies"])
def test_no_project_import_hides_in_a_function(package):
  """The library and the study import one another at the top of a module
  (there is no cycle left to hide from; XLA's options are set by the
  programs' entry point, experiments.cli.run, before anything computes)."""
  bad = []
  for module, path in sorted(_modules(package).items()):
    if module in _LAZY_ON_PURPOSE:
      continue
    for fn in ast.walk(ast.parse(open(path).read(), path)):
      if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(fn):
          if (isinstance(node, ast.ImportFrom) and node.module
              and node.module.split(".")[0] in LAYERS):
            bad.append(f"{module}:{node.lineno}: from {node.module}")
          elif isinstance(node, ast.Import):
            bad += [f"{module}:{node.lineno}: import {a.name}" for a in node.names
                    if a.name.split(".")[0] in LAYERS]
  assert bad == []


def test_a_plain_import_in_a_function_is_caught(tmp_path):
  """The check above sees ``import X`` as well as ``from X import y``."""
  src = tmp_path / "m.py"
  src.write_text("def f():\n  import pe_spectral.pe.spectral\n")
  tree = ast.parse(src.read_text())
  fn = tree.body[0]
  found = [n for n in ast.walk(fn) if isinstance(n, ast.Import)
           and n.names[0].name.split(".")[0] in LAYERS]
  assert found


# The library's rooms, lowest first: a module imports only from its own room or
# a lower one (docs/architecture.md draws the same order).
ROOMS = ("runtime", "pe", "nn", "data", "analysis", "training")


def test_the_library_lives_in_its_rooms():
  """Every library module sits in a room (only the package's curated
  ``__init__`` stays on the top floor), and every room has modules."""
  mods = _modules("pe_spectral")
  loose = [m for m in mods if m.count(".") == 1 and m.split(".")[1] not in ROOMS]
  assert loose == []
  assert set(ROOMS) <= {m.split(".")[1] for m in mods if m.count(".") >= 1}


def test_rooms_import_only_downwards():
  """A room's modules import no module of a higher room (imports inside
  functions counted)."""
  rank = {r: i for i, r in enumerate(ROOMS)}
  bad = []
  for module, path in sorted(_modules("pe_spectral").items()):
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in rank:
      continue
    for name in sorted(imports_of(path, module)):
      other = name.split(".")
      if other[0] == "pe_spectral" and len(other) > 1 and other[1] in rank:
        if rank[other[1]] > rank[parts[1]]:
          bad.append(f"{module} ({parts[1]}) imports {name} ({other[1]})")
  assert bad == []


def test_the_top_level_names_resolve():
  """``import pe_spectral`` loads no JAX, and every curated name and former
  module name resolves (notebooks written before the rooms keep working)."""
  import subprocess
  import sys
  code = ("import sys, pe_spectral as p; assert 'jax' not in sys.modules; "
          "[getattr(p, n) for n in p.__all__ + sorted(p._MODULES)]; "
          "from pe_spectral import encodings, spectral; "
          "assert encodings.get('rope').name == 'rope' and p.build is p.training.config.build")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_modules_the_tests_import_define_no_flag_twice():
  """A pytest worker imports every project module some test file imports, in
  one process; absl has one flag namespace, so two of them defining the same
  flag at import fail whichever tests come second on that worker (a helper
  imported from a benchmark clashed with the study's report this way). All of
  them imported together in one process: no DuplicateFlagError."""
  import subprocess
  import sys
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  mods = set()
  for name in sorted(os.listdir(os.path.join(repo, "tests"))):
    if not name.endswith(".py"):
      continue
    path = os.path.join(repo, "tests", name)
    for node in ast.walk(ast.parse(open(path).read(), path)):
      if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [node.module] + [  # "from package import module" imports the module
            f"{node.module}.{a.name}" for a in node.names
            if os.path.exists(os.path.join(repo, *node.module.split("."), a.name + ".py"))]
      elif isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      else:
        continue
      mods.update(n for n in names if n.split(".")[0] in LAYERS[1:])
  assert {"studies.arxiv_2505_13027.report", "benchmarks.full_disk"} <= mods
  code = "import importlib, sys\nfor m in sys.argv[1:]:\n  importlib.import_module(m)\n"
  out = subprocess.run([sys.executable, "-c", code, *sorted(mods)], cwd=repo,
                       capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]

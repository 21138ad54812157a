"""The layout's promises, checked by walking every import statement (those
inside functions too): the library never reaches up into the programs, the
benchmarks or a study, and the programs never reach into a study."""
import ast
import os

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


def test_library_modules_have_no_import_cycle_at_module_level():
  """Module-level imports of the library form no cycle (an import inside a
  function may still close one: those are the issue's remaining work)."""
  mods = _modules("pe_spectral")
  graph = {}
  for module, path in mods.items():
    tree = ast.parse(open(path).read(), path)
    deps = set()
    for node in tree.body:  # module level only
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
      deps.update(n for n in names if n in mods and n != module)
    graph[module] = deps
  state = {}

  def visit(m, stack):
    state[m] = "open"
    for d in graph[m]:
      if state.get(d) == "open":
        raise AssertionError(" -> ".join(stack + [m, d]))
      if d not in state:
        visit(d, stack + [m])
    state[m] = "done"
  for m in graph:
    if m not in state:
      visit(m, [])

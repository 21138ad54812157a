"""Real text for the language-model task: a corpus of documents, split by
document, as flat byte arrays.

The default corpus needs no download: the Python standard library's own
source files of the interpreter that runs this (``sysconfig``'s ``stdlib``
folder, its test suites and ``site-packages`` left out): about 750 files and
12 MB of real text that no one here wrote. Other sources:

* a path: a text file, a directory (every file under it, recursively) or a
  glob (``"data/*.txt"``);
* ``hf:NAME[:CONFIG]``: a Hugging Face dataset through the optional
  ``datasets`` library (its ``text`` column; one row is one document), e.g.
  ``hf:wikitext:wikitext-103-raw-v1``. The dataset's own ``validation`` and
  ``test`` splits are used when it has them; otherwise its rows are split
  like files.

**Split by document.** Each document goes whole to one split, chosen by a
stable hash of its name (its path relative to the corpus root, or
``<split>/<row>``): SHA-256 of the name, its first 8 bytes read as a fraction
in [0, 1), below ``valid_frac`` to validation, below ``valid_frac +
test_frac`` to test, the rest to training. Adding a file moves no other file.
Each split is one flat array (the documents in name order, each followed by a
newline), so no window drawn from a split can reach into another.

**Tokens are bytes** (UTF-8), and token id = byte + 1 (id 0 is the model's
padding, never a byte), so ``vocab_size`` is 257 and a loss in nats per token
divided by ln 2 is **bits per byte**.

A :class:`Corpus` records its source, file count, bytes and a SHA-256 of its
content (:meth:`Corpus.record`); a run stores it and refuses to resume on a
different corpus. Bad input raises :class:`CorpusError` (a ``ValueError``)
with one line saying what is wrong.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import sysconfig
from typing import Callable, Optional

import numpy as np

__all__ = ["Corpus", "CorpusError", "load", "split_of", "stdlib_files", "BYTE_VOCAB",
           "DEFAULT", "encode", "decode"]

BYTE_VOCAB = 257  # 256 byte values + the padding id 0
DEFAULT = "stdlib"
SPLITS = ("train", "valid", "test")
# the standard library's own test suites and bundled third-party code are left
# out of the default corpus: what remains is the library itself
_STDLIB_SKIP = {"site-packages", "test", "tests", "idle_test", "__pycache__"}


class CorpusError(ValueError):
  """A corpus that cannot be used, in one line."""


def encode(text) -> np.ndarray:
  """Token ids (``uint16``, byte + 1) of ``text`` (``str`` as UTF-8, or bytes)."""
  data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
  return np.frombuffer(data, np.uint8).astype(np.uint16) + 1


def decode(ids) -> str:
  """The text of token ids (padding and out-of-range ids dropped; invalid
  UTF-8 replaced)."""
  ids = np.asarray(ids).astype(np.int64).ravel()
  ids = ids[(ids >= 1) & (ids <= 256)]
  return bytes((ids - 1).astype(np.uint8)).decode("utf-8", errors="replace")


def split_of(name: str, valid_frac: float, test_frac: float) -> str:
  """The split (``"train"``, ``"valid"``, ``"test"``) of the document called
  ``name``: a stable hash, the same on every machine and Python version."""
  u = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2.0 ** 64
  if u < valid_frac:
    return "valid"
  if u < valid_frac + test_frac:
    return "test"
  return "train"


@dataclasses.dataclass(frozen=True)
class Corpus:
  """Three splits of token ids (``uint16 [n]`` each, byte + 1) and where they
  came from."""
  source: str
  train: np.ndarray
  valid: np.ndarray
  test: np.ndarray
  files: dict          # {split: number of documents}
  sha256: str          # of every document's name and bytes, in order

  def split(self, name: str) -> np.ndarray:
    if name not in SPLITS:
      raise CorpusError(f"no split {name!r}; the splits are {', '.join(SPLITS)}")
    return getattr(self, name)

  def unigram_bits_per_byte(self, split: str = "test") -> float:
    """The baseline a model must beat: the cross-entropy (bits) on ``split``
    of the training split's byte frequencies (add-one smoothed)."""
    p = np.bincount(self.train, minlength=BYTE_VOCAB)[1:].astype(np.float64) + 1.0
    q = np.bincount(self.split(split), minlength=BYTE_VOCAB)[1:].astype(np.float64)
    return float(-(q / q.sum() * np.log2(p / p.sum())).sum())

  def record(self) -> dict:
    """What a run records of its corpus (``config.json``'s ``corpus``)."""
    return {"source": self.source, "files": sum(self.files.values()),
            "bytes": int(sum(getattr(self, s).size for s in SPLITS)),
            "sha256": self.sha256,
            "unigram_bits_per_byte": round(self.unigram_bits_per_byte(), 4),
            "splits": {s: {"files": self.files[s], "bytes": int(getattr(self, s).size)}
                       for s in SPLITS}}


def stdlib_files() -> tuple[str, list[str]]:
  """``(root, relative paths)`` of the default corpus: the ``.py`` files of
  this interpreter's standard library, without its tests and site-packages."""
  root = sysconfig.get_paths()["stdlib"]
  out = []
  for folder, dirs, files in os.walk(root):
    rel = os.path.relpath(folder, root)
    parts = [] if rel == "." else rel.split(os.sep)
    dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP
                     and not (not parts and d.startswith("config-")))
    out += [os.path.join(rel, f) if parts else f for f in sorted(files) if f.endswith(".py")]
  return root, sorted(out)


def _path_documents(spec: str) -> tuple[str, list[str]]:
  """``(root, relative paths)`` of a file, a directory or a glob."""
  if any(c in spec for c in "*?["):
    paths = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
    if not paths:
      raise CorpusError(f"corpus {spec!r}: the glob matches no file")
    root = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
    return root, [os.path.relpath(os.path.abspath(p), root) for p in paths]
  if os.path.isfile(spec):
    return os.path.dirname(os.path.abspath(spec)), [os.path.basename(spec)]
  if os.path.isdir(spec):
    rels = []
    for folder, dirs, files in os.walk(spec):
      dirs[:] = sorted(d for d in dirs if not d.startswith("."))
      rels += [os.path.relpath(os.path.join(folder, f), spec) for f in sorted(files)
               if not f.startswith(".")]
    if not rels:
      raise CorpusError(f"corpus {spec!r}: the directory holds no file")
    return os.path.abspath(spec), sorted(rels)
  raise CorpusError(f"corpus {spec!r}: no such file or directory")


def _hf_documents(spec: str):
  """``[(name, text, split or None)]`` of ``hf:NAME[:CONFIG]`` through ``datasets``."""
  try:
    import datasets  # noqa: PLC0415 -- optional: only this source needs it
  except ImportError:
    raise CorpusError(f"corpus {spec!r} needs the optional 'datasets' library "
                      "(pip install datasets)") from None
  body = spec[len("hf:"):]
  name, _, config = body.partition(":")
  if not name:
    raise CorpusError(f"corpus {spec!r}: give a dataset name, hf:NAME[:CONFIG]")
  try:
    ds = datasets.load_dataset(name, config or None)
  except Exception as e:  # noqa: BLE001 -- the hub, a missing file: one line
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise CorpusError(f"corpus {spec!r}: datasets could not load it: {first}") from None
  own = {"train": "train", "validation": "valid", "valid": "valid", "test": "test"}
  has_own = {"validation", "test"} & set(ds) or {"valid", "test"} & set(ds)
  docs = []
  for split_name in sorted(ds):
    table = ds[split_name]
    if "text" not in table.column_names:
      raise CorpusError(f"corpus {spec!r}: split {split_name!r} has no 'text' column "
                        f"(it has {', '.join(table.column_names)})")
    for i, text in enumerate(table["text"]):
      docs.append((f"{split_name}/{i:09d}", text or "",
                   own.get(split_name) if has_own else None))
  return docs


def load(spec: Optional[str] = None, *, valid_frac: float = 0.05, test_frac: float = 0.05,
         notify: Callable[[str], None] = lambda msg: None) -> Corpus:
  """The corpus ``spec`` (None or ``"stdlib"``: the default; a path, a glob,
  or ``hf:NAME[:CONFIG]``), split by document (module docstring).
  :class:`CorpusError` for a missing path, an empty corpus, a split with no
  document or bytes, or a missing ``datasets``."""
  spec = spec or DEFAULT
  if not (0 < valid_frac < 1 and 0 < test_frac < 1 and valid_frac + test_frac < 1):
    raise CorpusError(f"valid_frac and test_frac must be in (0, 1) with a sum below 1, got "
                      f"{valid_frac} and {test_frac}")
  if spec == DEFAULT:
    root, rels = stdlib_files()
    docs = ((r, os.path.join(root, r), None) for r in rels)
    source = f"stdlib:{root}"
  elif spec.startswith("hf:"):
    docs = _hf_documents(spec)
    source = spec
  else:
    root, rels = _path_documents(spec)
    docs = ((r, os.path.join(root, r), None) for r in rels)
    source = os.path.abspath(spec) if not any(c in spec for c in "*?[") else spec
  parts = {s: [] for s in SPLITS}
  files = {s: 0 for s in SPLITS}
  digest = hashlib.sha256()
  for name, body, split in docs:
    if spec.startswith("hf:"):
      data = body.encode("utf-8")
    else:
      with open(body, "rb") as f:
        data = f.read()
    if not data:
      continue
    split = split or split_of(name, valid_frac, test_frac)
    digest.update(name.encode("utf-8") + b"\0" + len(data).to_bytes(8, "big") + data)
    parts[split].append(data if data.endswith(b"\n") else data + b"\n")
    files[split] += 1
  if not sum(files.values()):
    raise CorpusError(f"corpus {spec!r} is empty (no document has a byte)")
  empty = [s for s in SPLITS if not files[s]]
  if empty:
    raise CorpusError(f"corpus {spec!r}: the {' and '.join(empty)} split(s) got no document "
                      f"of its {sum(files.values())} (documents are split whole, by a hash of "
                      f"their names); give more documents")
  arrays = {s: encode(b"".join(parts[s])) for s in SPLITS}
  corpus = Corpus(source, arrays["train"], arrays["valid"], arrays["test"], files,
                  digest.hexdigest())
  rec = corpus.record()
  notify(f"corpus {source}: {rec['files']} documents, {rec['bytes'] / 1e6:.2f} MB "
         f"(train {files['train']}, valid {files['valid']}, test {files['test']}); unigram "
         f"{rec['unigram_bits_per_byte']:.3f} bits/byte")
  return corpus

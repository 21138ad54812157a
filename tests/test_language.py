"""The language-model task (``--task=lm``): the corpus and its split by
document, windows that never leave their split, the causal mask of every PE,
bits per byte against a float64 cross-entropy of the model's own logits, exact
resume, and one-line refusals of bad input."""
import json
import math
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_spectral.data import corpus, tasks
from pe_spectral.nn import model as M
from pe_spectral.pe import encodings
from pe_spectral.training import config, runner
from pe_spectral.training.train import make_steps

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# bytes that no file shares (a newline ends every document, so it is in every split)
_BYTES = [b for b in list(range(33, 127)) + list(range(160, 186))]


def _write_corpus(folder, n=len(_BYTES)):
  """``n`` documents, document ``i`` made of one byte of its own: a token says
  which document, so which split, it came from."""
  os.makedirs(folder, exist_ok=True)
  for i in range(n):
    with open(os.path.join(folder, f"doc{i:03d}.txt"), "wb") as f:
      f.write(bytes([_BYTES[i]]) * (200 + i) + b"\n")
  return {f"doc{i:03d}.txt": _BYTES[i] + 1 for i in range(n)}  # name -> its token id


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
  folder = str(tmp_path_factory.mktemp("corpus"))
  return folder, _write_corpus(folder)


def _token_split(folder, token_of):
  """``{token id: split}`` from the split rule applied to each name."""
  return {tok: corpus.split_of(name, 0.05, 0.05) for name, tok in token_of.items()}


# -- the corpus ----------------------------------------------------------------

def test_the_split_is_by_whole_document_stable_and_about_the_asked_fractions():
  names = [f"pkg/module_{i}.py" for i in range(20_000)]
  got = [corpus.split_of(n, 0.05, 0.05) for n in names]
  # the same name gets the same split in another process with another string
  # hash seed (a split by Python's hash() would differ there)
  code = ("from pe_spectral.data import corpus; print(','.join(corpus.split_of("
          "f'pkg/module_{i}.py', 0.05, 0.05) for i in range(100)))")
  other = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, check=True)
  assert got[:100] == other.stdout.strip().split(",")
  for split, frac in (("valid", 0.05), ("test", 0.05), ("train", 0.9)):
    share = got.count(split) / len(got)
    assert abs(share - frac) < 5 * math.sqrt(frac * (1 - frac) / len(got)), (split, share)


def test_each_document_lands_whole_in_one_split_and_the_record_counts_them(tiny_corpus):
  folder, token_of = tiny_corpus
  c = corpus.load(folder)
  where = _token_split(folder, token_of)
  for split in corpus.SPLITS:
    arr = c.split(split)
    for tok, s in where.items():
      n = int((arr == tok).sum())
      size = 200 + list(token_of.values()).index(tok)
      assert n == (size if s == split else 0), (tok, s, split)
  rec = c.record()
  assert rec["files"] == len(token_of) == sum(v["files"] for v in rec["splits"].values())
  assert rec["bytes"] == sum(os.path.getsize(os.path.join(folder, f)) for f in token_of)
  assert len(rec["sha256"]) == 64 and corpus.load(folder).sha256 == rec["sha256"]


def test_the_default_corpus_is_this_pythons_standard_library():
  root, rels = corpus.stdlib_files()
  assert len(rels) > 300 and "os.py" in rels and "json/decoder.py" in rels
  assert not any(r.startswith(("test/", "site-packages/")) or "/tests/" in r for r in rels)


def test_bytes_encode_to_ids_one_above_and_decode_back():
  ids = corpus.encode("déf f(x):\n")
  assert ids.min() >= 1 and ids.max() <= 256
  np.testing.assert_array_equal(ids, np.frombuffer("déf f(x):\n".encode(), np.uint8) + 1)
  assert corpus.decode(np.concatenate([[0], ids])) == "déf f(x):\n"


@pytest.mark.parametrize("make,message", [
    (lambda d: os.path.join(d, "missing"), "no such file or directory"),
    (lambda d: d, "holds no file"),
    (lambda d: (open(os.path.join(d, "empty.txt"), "w").close(), d)[1], "is empty"),
    (lambda d: (open(os.path.join(d, "one.txt"), "w").write("x" * 99), d)[1], "got no document"),
    (lambda d: os.path.join(d, "*.none"), "matches no file"),
])
def test_bad_corpora_are_one_line(tmp_path, make, message):
  with pytest.raises(corpus.CorpusError, match=message) as e:
    corpus.load(make(str(tmp_path)))
  assert "\n" not in str(e.value)


def test_a_split_shorter_than_one_window_is_refused(tiny_corpus):
  folder, _ = tiny_corpus
  cfg = config.build("smoke", "lm", "rope", data=folder).task
  tasks.check_corpus(cfg)  # 32 + 1 tokens fit every split
  with pytest.raises(corpus.CorpusError, match="fewer than one window"):
    tasks.check_corpus(cfg, length=100_000)


def test_hf_datasets_local_loader_gives_its_own_splits(tmp_path, monkeypatch):
  """``hf:`` through ``datasets``' own loader, on local text files (no hub):
  each row is a document and the dataset's validation and test splits are kept."""
  pytest.importorskip("datasets")
  monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  d = tmp_path / "ds"
  d.mkdir()
  (d / "train.txt").write_text("a train line\nanother one\n")
  (d / "validation.txt").write_text("valid line\n")
  (d / "test.txt").write_text("the test\n")
  c = corpus.load(f"hf:{d}")
  assert corpus.decode(c.valid) == "valid line\n"
  assert corpus.decode(c.test) == "the test\n"
  assert corpus.decode(c.train) == "a train line\nanother one\n"
  assert c.record()["files"] == 4


def test_hf_without_datasets_is_one_line(monkeypatch):
  monkeypatch.setitem(sys.modules, "datasets", None)  # import fails
  with pytest.raises(corpus.CorpusError, match="needs the optional 'datasets'"):
    corpus.load("hf:wikitext")


# -- windows -------------------------------------------------------------------

def test_training_and_evaluation_windows_never_leave_their_split(tiny_corpus):
  folder, token_of = tiny_corpus
  rc = config.build("smoke", "lm", "rope", data=folder)
  data = tasks.generate(rc.task)
  where = _token_split(folder, token_of)
  newline = ord("\n") + 1
  allowed = lambda split: {t for t, s in where.items() if s == split} | {newline}
  steps = make_steps(rc.model, rc.task, rc.train, rc.task.num_train)
  draw = jax.jit(jax.vmap(lambda k: steps.windows(k, data.train_ids)))
  ids, nxt = draw(jax.random.split(jax.random.key(3), 200))
  assert set(np.unique(np.asarray(ids))) <= allowed("train")
  np.testing.assert_array_equal(np.asarray(ids)[..., 1:], np.asarray(nxt)[..., :-1])
  assert set(np.unique(np.asarray(data.test_ids))) <= allowed("valid")
  assert set(np.unique(np.asarray(data.train_eval_ids))) <= allowed("train")
  # evaluation windows are disjoint in their targets: starts are seq_len apart
  w = np.asarray(data.test_ids)
  assert w.shape[1] == rc.task.seq_len + 1


def test_eval_windows_are_evenly_spaced_and_score_each_token_once():
  tokens = np.arange(1, 1001)
  w = tasks.eval_windows(tokens, 10, 7)
  assert w.shape == (7, 11)
  targets = w[:, 1:].ravel()
  assert len(set(targets)) == targets.size  # no token scored twice
  assert w[0, 0] == 1 and w[-1, 0] == 1 + 10 * ((1000 - 1) // 10 - 1)


# -- the model -----------------------------------------------------------------

@pytest.mark.parametrize("pe", encodings.names())
def test_no_logit_sees_a_later_token(pe):
  """Every registered PE, causally: changing token 20 changes no logit before
  position 20, and changes some logit from it on."""
  rc = config.build("smoke", "lm", pe)
  assert rc.model.causal and rc.model.per_token
  graphdef, params = M.init_model(rc.model, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (2, rc.task.seq_len), 1, 257)
  other = ids.at[:, 20].set(ids[:, 20] % 256 + 1)
  a = np.asarray(M.apply_model(graphdef, params, ids))
  b = np.asarray(M.apply_model(graphdef, params, other))
  assert a.shape == (2, rc.task.seq_len, 257)
  np.testing.assert_array_equal(a[:, :20], b[:, :20])
  assert np.abs(a[:, 20:] - b[:, 20:]).max() > 1e-4


def test_a_language_model_must_be_causal():
  with pytest.raises(ValueError, match="causal"):
    M.ModelConfig(per_token=True, causal=False)
  with pytest.raises(ValueError, match="faithful"):
    config.build("smoke", "lm", "rope", faithful=True)
  with pytest.raises(ValueError, match="lm task"):
    config.build("smoke", "distance", "rope", data="/tmp")


# -- training ------------------------------------------------------------------

def _run(rc, workdir, **hooks):
  return runner.run(rc, [0, 1], workdir, runner.RunOptions(eval_every=4),
                    runner.Hooks(notify=lambda m: None, **hooks))


@pytest.fixture(scope="module")
def trained(tiny_corpus, tmp_path_factory):
  folder, _ = tiny_corpus
  rc = config.build("smoke", "lm", "alibi", data=folder, steps=12)
  wd = str(tmp_path_factory.mktemp("lm") / "run")
  return rc, wd, _run(rc, wd)


def test_bits_per_byte_is_the_float64_cross_entropy_of_the_models_own_logits(trained):
  rc, wd, summary = trained
  loaded = runner.load_run(wd, lambda m: None)
  windows = np.asarray(loaded.data.test_ids)
  for seed in range(2):
    params = jax.tree.map(lambda x: x[seed], loaded.states["params"])
    logits = np.asarray(M.apply_model(loaded.steps.graphdef, params,
                                      jnp.asarray(windows[:, :-1])), np.float64)
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, windows[:, 1:, None], -1).mean()
    np.testing.assert_allclose(summary["test_bits_per_byte"][seed], nll / np.log(2),
                               rtol=2e-5)
  with open(os.path.join(wd, "config.json")) as f:
    assert json.load(f)["corpus"]["sha256"] == corpus.load(rc.task.corpus).sha256


def test_a_stopped_run_resumes_bit_identical(trained, tmp_path):
  rc, wd, summary = trained
  calls = []
  with pytest.raises(runner.Interrupted):
    _run(rc, str(tmp_path / "b"), should_stop=lambda: calls.append(1) or len(calls) >= 2)
  resumed = _run(rc, str(tmp_path / "b"))
  assert resumed["test_bits_per_byte"] == summary["test_bits_per_byte"]
  strip = lambda p: [{k: v for k, v in json.loads(line).items() if k != "elapsed"}
                     for line in open(p)]
  for f in ("metrics.jsonl", "steps.jsonl"):
    assert strip(os.path.join(wd, f)) == strip(str(tmp_path / "b" / f))
  a = runner.load_run(wd, lambda m: None).states
  b = runner.load_run(str(tmp_path / "b"), lambda m: None).states
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_resume_on_other_text_is_refused(trained, tmp_path):
  rc, wd, _ = trained
  folder = str(tmp_path / "corpus")
  shutil.copytree(rc.task.corpus, folder)
  copy = str(tmp_path / "run")
  shutil.copytree(wd, copy)
  os.remove(os.path.join(copy, "summary.json"))
  with open(os.path.join(copy, "config.json")) as f:
    cfg = json.load(f)
  cfg["run"]["task"]["corpus"] = folder  # the same path, now with other text
  with open(os.path.join(copy, "config.json"), "w") as f:
    json.dump(cfg, f)
  with open(os.path.join(folder, "doc000.txt"), "ab") as f:
    f.write(b"more")
  tasks.load_corpus.cache_clear()
  with pytest.raises(runner.ConfigMismatchError, match="sha256"):
    _run(config.build("smoke", "lm", "alibi", data=folder, steps=12), copy)


def test_the_sweep_refuses_a_missing_corpus_in_one_line(tmp_path):
  out = subprocess.run([sys.executable, "-m", "experiments.sweep", "--task=lm",
                        "--preset=smoke", f"--data={tmp_path}/nowhere",
                        f"--workdir={tmp_path}/w"], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 2, out.stderr
  assert out.stderr.strip().splitlines() == [
      f"error: --data: corpus '{tmp_path}/nowhere': no such file or directory"]
  assert not os.path.exists(tmp_path / "w")


# -- the evaluations -----------------------------------------------------------

def test_position_nll_is_the_float64_cross_entropy_at_every_position(trained):
  """analysis.language at 2x the training length, with and without YaRN on a
  rotary model: each position's mean NLL equals a float64 numpy loop over the
  model's own logits."""
  from pe_spectral.analysis import extrapolation, language
  rc, _, _ = trained
  rc = config.build("smoke", "lm", "rope", data=rc.task.corpus)
  _, params = jax.vmap(lambda k: M.init_model(rc.model, k))(
      jax.random.split(jax.random.key(5), 2))
  c = tasks.load_corpus(rc.task.corpus)
  n = 2 * rc.task.seq_len
  windows = language.test_windows(c.test, n, 3 * n)
  assert windows.shape == (3, n + 1)
  for scaling in ("none", "yarn"):
    cfg = extrapolation.eval_model_config(rc.model, n, rc.task.seq_len, scaling)
    graphdef = jax.eval_shape(lambda: M.init_model(cfg, jax.random.key(0)))[0]
    got = language.position_nll(graphdef, params, windows, max_batch_tokens=2 * n)
    for seed in range(2):
      p = jax.tree.map(lambda x: x[seed], params)
      logits = np.asarray(M.apply_model(graphdef, p, jnp.asarray(windows[:, :-1])), np.float64)
      z = logits - logits.max(-1, keepdims=True)
      logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
      want = -np.take_along_axis(logp, windows[:, 1:, None], -1)[..., 0].mean(0)
      np.testing.assert_allclose(got[seed], want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(language.bits_per_byte(got), got.mean(-1) / np.log(2))


def test_a_passkey_prompt_is_exactly_as_long_as_asked_with_the_needle_at_its_depth():
  from pe_spectral.analysis import language
  shortest = language.passkey_min_length()
  for n in (shortest, 300, 1000):
    for depth in (0.0, 0.5, 1.0):
      ids, answer = language.passkey_prompt(n, depth, "40718")
      text = corpus.decode(ids)
      assert ids.shape == (n,) and answer == "40718"
      assert text.startswith(language.PASSKEY_INTRO)
      assert text.endswith("What is the pass key? The pass key is ")
      at = text.index("The pass key is 40718.")
      room = n - shortest
      assert at == len(language.PASSKEY_INTRO) + int(round(depth * room))
  with pytest.raises(ValueError, match="at least"):
    language.passkey_prompt(shortest - 1, 0.5, "12345")


def test_passkey_scoring_takes_only_the_exact_digits():
  from pe_spectral.analysis import language
  said = np.stack([corpus.encode("40718"), corpus.encode("40719"), corpus.encode("4071.")])
  np.testing.assert_array_equal(
      language.score_passkey(said[None], ["40718", "40718", "40718"]), [[1.0, 0.0, 0.0]])


def test_greedy_continuation_is_the_unjitted_argmax_loop(trained):
  from pe_spectral.analysis import language
  rc, wd, _ = trained
  run = runner.load_run(wd, lambda m: None)
  prompts = np.asarray(run.data.test_ids[:2, :-1])
  got = language.greedy_continuation(run.steps.graphdef, run.states["params"], prompts, 3)
  for seed in range(2):
    p = jax.tree.map(lambda x: x[seed], run.states["params"])
    ids = prompts.copy()
    for t in range(3):
      logits = np.asarray(M.apply_model(run.steps.graphdef, p, jnp.asarray(ids)))
      nxt = logits[:, -1].argmax(-1)
      np.testing.assert_array_equal(got[seed, :, t], nxt)
      ids = np.concatenate([ids[:, 1:], nxt[:, None]], 1)


def test_the_lengths_program_writes_the_language_evaluations(trained, tmp_path):
  """experiments.lengths on an lm run: bits per byte per length and seed (the
  1x row from its own test windows), loss by position, passkey, figures."""
  _, wd, _ = trained
  copy = str(tmp_path / "run")
  shutil.copytree(wd, copy)
  out = subprocess.run([sys.executable, "-m", "experiments.lengths", f"--workdir={copy}",
                        "--factors=1,2", "--tokens=256", "--passkey_trials=1",
                        "--passkey_depths=0,1"],
                       cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  with open(os.path.join(copy, "lengths.json")) as f:
    res = json.load(f)
  rows = res["bits_per_byte"]["none"]
  assert [r["seq_len"] for r in rows] == [32, 64]
  assert all(len(r["bits_per_byte"]) == 2 for r in rows)
  assert list(res["bits_per_byte"]) == ["none"]  # alibi: no RoPE scaling
  assert len(res["loss_by_position"]["none"]["64"]) == 64
  assert res["passkey"]["lengths"] == []  # a passkey prompt needs 244 bytes or more
  for name in ("lengths.png", "loss_by_position.png"):
    assert os.path.getsize(os.path.join(copy, name)) > 0


def test_the_inspect_notebook_shows_attention_over_real_text(trained, monkeypatch):
  """notebooks/inspect_run.ipynb on an lm run: the window's text is printed
  and its attention maps drawn (causal rows sum to one)."""
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  _, wd, _ = trained
  path = os.path.join(ROOT, "notebooks", "inspect_run.ipynb")
  nb = nbformat.read(path, as_version=4)
  monkeypatch.setenv("PE_SPECTRAL_RUN", wd)
  nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={
      "metadata": {"path": os.path.dirname(path)}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
  window = np.asarray(runner.load_run(wd, lambda m: None).data.test_ids[0, :-1])
  assert repr(corpus.decode(window)) in text
  assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 2


def test_head_knockouts_on_real_text_score_next_byte_accuracy(trained):
  """The ablation on lm windows: its baseline is each seed's next-byte accuracy
  (numpy argmax of the model's own logits), the shared and masked paths agree,
  and a knock-out moves it."""
  from pe_spectral.analysis import ablation, decompose
  rc, wd, _ = trained
  run = runner.load_run(wd, lambda m: None)
  w = run.data.test_ids
  labels = jnp.zeros((w.shape[0],), jnp.int32)
  shared = ablation.ablate_heads(run.steps, run.states["params"], w, labels)
  masked = ablation.ablate_heads(run.steps, run.states["params"], w, labels, method="masked")
  np.testing.assert_allclose(shared["ablated"], masked["ablated"], atol=1e-6)
  for seed in range(2):
    p = jax.tree.map(lambda x: x[seed], run.states["params"])
    logits = np.asarray(M.apply_model(run.steps.graphdef, p, w[:, :-1]))
    want = (logits.argmax(-1) == np.asarray(w[:, 1:])).mean()
    np.testing.assert_allclose(shared["baseline"][seed], want, rtol=1e-6)
  assert np.abs(shared["ablated"] - shared["baseline"][:, None, None]).max() > 0
  # the decomposition reads the windows' tokens: its exact identity holds on real text
  summ = decompose.summarize(run.steps.graphdef, run.states["params"], w[:4, :-1],
                             rc.model.num_layers)
  assert max(float(np.max(s["additive_residual"])) for s in summ) < 1e-4

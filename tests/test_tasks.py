import numpy as np
import pytest

from pe_spectral.data.tasks import TaskConfig, generate, lengthened, trigger_ids

PAPER_DISTANCE = TaskConfig(name="distance", num_examples=12_000)
PAPER_COUNT = TaskConfig(name="count", num_examples=12_000, count_max=100)


def _distance_parses(tokens, a, b, cfg):
  """All (label) values of parses left+[a]+mid+[b]+right consistent with the generator."""
  n = len(tokens)
  labels = set()
  for i in range(cfg.side_min, cfg.side_max + 1):
    if i >= n or tokens[i] != a:
      continue
    for m in range(cfg.mid_min, cfg.mid_max + 1):
      j = i + m + 1
      if j >= n or tokens[j] != b:
        continue
      right = n - j - 1
      cut = n == cfg.seq_len
      if right > cfg.side_max or (right < cfg.side_min and not cut):
        continue
      segs = (tokens[:i], tokens[i + 1:j], tokens[j + 1:])
      if any(len(set(s)) != len(s) for s in segs):  # no repeats within a segment
        continue
      labels.add(m + 1)
  return labels


def test_distance_labels_match_python_oracle():
  cfg = PAPER_DISTANCE
  d = generate(cfg)
  a, b = (int(t) for t in d.triggers)
  ids = np.concatenate([np.asarray(d.train_ids), np.asarray(d.test_ids)])
  labels = np.concatenate([np.asarray(d.train_labels), np.asarray(d.test_labels)])
  assert len(labels) == 12_000 >= 10_000
  unambiguous = 0
  for row, y in zip(ids, labels):
    n = int((row != 0).sum())
    assert (row[:n] != 0).all() and (row[n:] == 0).all()  # right-padded
    tokens = [int(t) for t in row[:n]]
    assert 5 <= n <= cfg.seq_len
    assert int(y) in _distance_parses(tokens, a, b, cfg)
    if tokens.count(a) == 1 and tokens.count(b) == 1:
      unambiguous += 1
      assert int(y) == tokens.index(b) - tokens.index(a)
  assert unambiguous > 0.7 * len(labels)
  assert labels.min() >= cfg.label_min and labels.max() <= cfg.label_max


def test_distance_statistics_match_protocol():
  """PROTOCOL §1.2: mean length ≈ 63.5 words; ~20% reuse a trigger as a filler."""
  d = generate(PAPER_DISTANCE)
  ids = np.asarray(d.train_ids)
  assert abs((ids != 0).sum(1).mean() - 63.5) < 1.0
  a, b = (int(t) for t in d.triggers)
  extra = ((ids == a).sum(1) + (ids == b).sum(1)) > 2
  assert 0.15 < extra.mean() < 0.25
  # labels roughly uniform over 2..71
  counts = np.bincount(np.asarray(d.train_labels), minlength=72)[2:]
  assert counts.min() > 0.6 * counts.mean()


def test_count_labels_match_python_oracle():
  cfg = PAPER_COUNT
  d = generate(cfg)
  trig = set(int(t) for t in d.triggers)
  assert len(trig) == cfg.num_triggers
  for ids, labels in ((d.train_ids, d.train_labels), (d.test_ids, d.test_labels)):
    for row, y in zip(np.asarray(ids), np.asarray(labels)):
      tokens = [int(t) for t in row]
      assert all(t != 0 for t in tokens[:cfg.seq_len])
      assert all(t == 0 for t in tokens[cfg.seq_len:])
      assert sum(t in trig for t in tokens) == int(y)
  y = np.asarray(d.train_labels)
  assert y.min() == 0 and y.max() == cfg.count_max


def test_split_sizes_and_determinism():
  cfg = TaskConfig(name="distance", num_examples=1000, data_seed=3)
  d1, d2 = generate(cfg), generate(cfg)
  assert d1.train_ids.shape == (700, 128) and d1.test_ids.shape == (300, 128)
  np.testing.assert_array_equal(d1.train_ids, d2.train_ids)
  np.testing.assert_array_equal(d1.test_labels, d2.test_labels)
  np.testing.assert_array_equal(trigger_ids(cfg), d1.triggers)
  d3 = generate(cfg.replace(data_seed=4))
  assert not np.array_equal(d1.train_ids, d3.train_ids)


@pytest.mark.parametrize("kw,msg", [
    (dict(name="copy"), "unknown task"),
    (dict(seq_len=130), "exceeds max_len"),
    (dict(side_max=60), "second trigger could be cut"),
    (dict(name="count", count_max=121), "count_max"),
    (dict(name="count", num_triggers=600), "num_triggers"),
    (dict(train_frac=1.0), "train_frac"),
])
def test_bad_task_config(kw, msg):
  with pytest.raises(ValueError, match=msg):
    TaskConfig(**kw)


@pytest.mark.parametrize("factor", [2, 4])
def test_lengthened_tasks_keep_the_labels_and_parse(factor):
  """Length-generalisation test sets: same label range and rule (parse oracle
  with the lengthened config), longer sentences, triggers further right."""
  base = TaskConfig(name="distance", num_examples=3000, seq_len=48, max_len=48,
                    side_max=10, mid_max=30)
  cfg = lengthened(base, 48 * factor)
  assert (cfg.label_min, cfg.label_max) == (base.label_min, base.label_max)
  d0, d = generate(base), generate(cfg)
  a, b = (int(t) for t in d.triggers)
  assert (a, b) == tuple(int(t) for t in d0.triggers)
  ids, labels = np.asarray(d.test_ids), np.asarray(d.test_labels)
  assert ids.shape[1] == 48 * factor
  starts = []
  for row, y in zip(ids, labels):
    n = int((row != 0).sum())
    tokens = [int(t) for t in row[:n]]
    assert int(y) in _distance_parses(tokens, a, b, cfg)
    starts.append(tokens.index(a))
  assert base.label_min <= labels.min() and labels.max() <= base.label_max
  short = [list(map(int, r)).index(a) for r in np.asarray(d0.test_ids)]
  assert np.mean(starts) > np.mean(short) + 10 * (factor - 1)
  count = TaskConfig(name="count", num_examples=2000, seq_len=48, max_len=48,
                     count_max=40)
  dc = generate(lengthened(count, 48 * factor))
  trig = set(int(t) for t in dc.triggers)
  for row, y in zip(np.asarray(dc.test_ids), np.asarray(dc.test_labels)):
    assert sum(int(t) in trig for t in row) == int(y) <= 40


# ---- the string tasks of Delétang et al. / Ruoss et al. ---------------------
# Oracles written from the tasks' definitions on the decoded strings, in plain
# Python (the expression through Python's own parser and operator precedence).

def _decode(row):
  return [int(t) for t in row if t != 0]


def _oracle(name, toks):
  if name == "parity_check":  # ids 1, 2 = a, b
    return "".join("ab"[t - 1] for t in toks).count("b") % 2
  if name == "even_pairs":
    s = "".join("ab"[t - 1] for t in toks)
    return sum(s[i:i + 2] in ("ab", "ba") for i in range(len(s) - 1)) % 2
  if name == "cycle_navigation":  # ids 1, 2, 3 = -1, 0, +1
    position = 0
    for t in toks:
      position = (position + {1: -1, 2: 0, 3: 1}[t]) % 5
    return position
  # modular_arithmetic: ids 1..5 = residues 0..4, 6, 7, 8 = +, -, *
  text = "".join(str(t - 1) if t <= 5 else "+-*"[t - 6] for t in toks)
  return eval(text) % 5  # noqa: S307 -- digits and + - * only, built above


STRING = ["parity_check", "even_pairs", "cycle_navigation", "modular_arithmetic"]


@pytest.mark.parametrize("name", STRING)
def test_string_task_labels_match_python_oracle(name):
  """5,000 generated examples per task: every label equals the oracle's, the
  lengths cover min_len..seq_len (modular_arithmetic: the odd ones), every
  label occurs, and the tokens are the task's symbols, then padding."""
  from pe_spectral.data.tasks import STRING_TASKS
  vocab, labels = STRING_TASKS[name]
  cfg = TaskConfig(name=name, vocab_size=vocab, num_examples=5000, seq_len=15, max_len=20,
                   min_len=2)
  d = generate(cfg)
  ids = np.concatenate([np.asarray(d.train_ids), np.asarray(d.test_ids)])
  ys = np.concatenate([np.asarray(d.train_labels), np.asarray(d.test_labels)])
  lengths = set()
  for row, y in zip(ids, ys):
    toks = _decode(row)
    assert all(t != 0 for t in row[:len(toks)]) and not row[len(toks):].any()
    assert set(toks) <= set(range(1, vocab))
    assert y == _oracle(name, toks), (toks, y)
    lengths.add(len(toks))
  want = set(range(2, 16))
  if name == "modular_arithmetic":  # odd: an even length drops its last token
    want = {n - (1 - n % 2) for n in want}
  assert lengths == want
  assert set(ys.tolist()) == set(range(labels))


@pytest.mark.parametrize("name", STRING)
def test_lengthened_string_tasks_have_exactly_that_length(name):
  from pe_spectral.training.config import task_config
  cfg = task_config("smoke", name)
  long = lengthened(cfg, 30)
  d = generate(long, num_examples=300)
  got = {len(_decode(r)) for r in np.asarray(d.train_ids)}
  assert got == ({29} if name == "modular_arithmetic" else {30})
  assert long.label_max == cfg.label_max and long.vocab_size == cfg.vocab_size


def test_string_tasks_refuse_what_they_cannot_be():
  from pe_spectral.training.config import build
  with pytest.raises(ValueError, match="task 'cycle_navigation' has vocab_size 4"):
    TaskConfig(name="cycle_navigation", vocab_size=64, seq_len=10, max_len=12)
  with pytest.raises(ValueError, match="need 1 <= min_len <= seq_len"):
    TaskConfig(name="parity_check", vocab_size=3, seq_len=10, max_len=12, min_len=11)
  with pytest.raises(ValueError, match="faithful mode .* not 'even_pairs'"):
    build("smoke", "even_pairs", "rope", faithful=True)
  with pytest.raises(ValueError, match="preset 'paper' has no task 'parity_check'"):
    build("paper", "parity_check", "rope")
  rc = build("cpu", "modular_arithmetic", "rope")
  assert (rc.task.seq_len, rc.task.min_len, rc.model.num_classes) == (40, 1, 5)
  assert "min_len" in rc.task.to_dict() and "min_len" not in build(
      "cpu", "distance", "rope").task.to_dict()  # the paper tasks' records are unchanged


def test_a_string_task_runs_through_the_sweep_and_the_length_tool(tmp_path):
  """even_pairs end to end on the smoke preset: trained on lengths 1..12,
  evaluated at exactly 12 and 24 tokens."""
  import json
  import subprocess
  import sys
  wd = str(tmp_path / "run")
  run = lambda *a: subprocess.run([sys.executable, "-m", *a], capture_output=True, text=True)
  out = run("experiments.sweep", "--preset=smoke", "--task=even_pairs", "--seeds=1",
            "--steps=6", "--eval_every=6", f"--workdir={wd}")
  assert out.returncode == 0, out.stderr[-2000:]
  out = run("experiments.lengths", f"--workdir={wd}", "--factors=1,2", "--examples=64")
  assert out.returncode == 0, out.stderr[-2000:]
  res = json.load(open(f"{wd}/lengths.json"))
  assert res["task"] == "even_pairs" and [r["seq_len"] for r in res["lengths"]] == [12, 24]

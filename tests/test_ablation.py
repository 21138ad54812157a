import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_cli_batch

from pe_spectral.analysis import ablation
from pe_spectral.data import tasks
from pe_spectral.training import config as configs
from pe_spectral.training import train


@pytest.fixture(scope="module")
def trained():
  rc = configs.build("smoke", "distance", "rope", steps=30)
  data = tasks.generate(rc.task)
  tr = train.make_steps(rc.model, rc.task, rc.train, data.train_ids.shape[0])
  keys = train.seed_keys([0, 1])
  states, _ = train.jit_chunk(tr)(train.jit_init(tr)(keys), keys, data.train_ids,
                                  data.train_labels, num_steps=30)
  return tr, states, data


def test_ablate_heads_equals_python_loop(trained):
  tr, states, data = trained
  res = ablation.ablate_heads(tr, states["params"], data.test_ids, data.test_labels)
  cfg = tr.model_cfg
  assert res["ablated"].shape == (2, cfg.num_layers, cfg.num_heads)
  for s in range(2):
    p = jax.tree.map(lambda x: x[s], states["params"])
    base = float(tr.evaluate_params(p, data.test_ids, data.test_labels)[0])
    assert res["baseline"][s] == pytest.approx(base, abs=1e-6)
    for l in range(cfg.num_layers):
      for h in range(cfg.num_heads):
        mask = jnp.ones((cfg.num_layers, cfg.num_heads)).at[l, h].set(0.0)
        acc = float(tr.evaluate_params(p, data.test_ids, data.test_labels, head_mask=mask)[0])
        assert res["ablated"][s, l, h] == pytest.approx(acc, abs=1e-6)
  assert np.abs(res["ablated"] - res["baseline"][:, None, None]).max() > 0


def test_chunked_masks_seed_groups_and_keep_only(trained):
  tr, states, data = trained
  a = ablation.ablate_heads(tr, states["params"], data.test_ids, data.test_labels)
  b = ablation.ablate_heads(tr, states["params"], data.test_ids, data.test_labels,
                            mask_chunk=3)
  np.testing.assert_allclose(a["ablated"], b["ablated"], atol=1e-6)
  # one seed at a time (the memory option): each seed's own numbers
  one = train.make_steps(tr.model_cfg, tr.task_cfg, tr.train_cfg, tr.num_train,
                         seed_group=1)
  c = ablation.ablate_heads(one, states["params"], data.test_ids, data.test_labels,
                            mask_chunk=1)
  np.testing.assert_allclose(c["ablated"], a["ablated"], atol=1e-6)
  np.testing.assert_allclose(c["baseline"], a["baseline"], atol=1e-6)
  k = ablation.ablate_heads(tr, states["params"], data.test_ids, data.test_labels,
                            mode="keep_only")
  assert ablation._STARTED == [None]   # no progress clock left running
  # With 2 heads, "keep only head 0" == "ablate head 1".
  np.testing.assert_allclose(k["ablated"][:, :, 0], a["ablated"][:, :, 1], atol=1e-6)


def test_ablating_a_dead_head_changes_nothing(trained):
  tr, states, data = trained
  params = jax.tree.map(lambda x: x, states["params"])
  # Kill layer 0 head 1 by zeroing its value projection columns: its output is 0.
  hd = tr.model_cfg.head_dim
  v = params["blocks"][0]["attn"]["v_proj"]
  v["kernel"] = v["kernel"].at[..., hd:2 * hd].set(0.0)
  v["bias"] = v["bias"].at[..., hd:2 * hd].set(0.0)
  res = ablation.ablate_heads(tr, params, data.test_ids, data.test_labels)
  np.testing.assert_allclose(res["ablated"][:, 0, 1], res["baseline"], atol=1e-6)


def test_leak_masks():
  m = ablation.head_masks(3, 4, leak=True)
  # ablating layer 2 head 0 also zeroes head 3 of layers 0 and 1
  assert m[2 * 4 + 0, 2, 0] == 0 and m[2 * 4 + 0, 0, 3] == 0 and m[2 * 4 + 0, 1, 3] == 0
  assert m[0, 0, 3] == 1
  clean = ablation.head_masks(3, 4)
  assert float(clean.sum()) == 12 * 11


def test_deposit_score_bounds():
  base = np.array([0.9])
  identical = np.full((1, 1, 4), 0.7)
  assert ablation.deposit_scores(base, identical)["score"][0, 0] == pytest.approx(0.0)
  single = np.array([[[0.2, 0.9, 0.9, 0.9]]])
  s = ablation.deposit_scores(base, single)
  assert s["score"][0, 0] == pytest.approx(1.0)
  assert s["max_drop"][0, 0] == pytest.approx(0.7) and s["argmax_head"][0, 0] == 0
  none = np.full((1, 1, 4), 0.9)
  assert ablation.deposit_scores(base, none)["score"][0, 0] == 0.0
  # a knock-out that raises accuracy: the original score leaves [0, 1]
  raised = np.array([[[0.8, 1.0]]])  # drops +0.1, -0.1
  s = ablation.deposit_scores(base, raised)
  assert s["score"][0, 0] == pytest.approx(2.0) and s["score_bounded"][0, 0] == pytest.approx(1.0)


def test_bounded_deposit_score_against_a_per_layer_loop():
  """``score_bounded`` is in [0, 1] on random drops of both signs, equals the
  original score where no drop is negative, and matches a plain loop."""
  rng = np.random.default_rng(0)
  drops = rng.normal(0.05, 0.1, (6, 3, 8))
  drops[0, 0] = np.abs(drops[0, 0])  # a layer without negative drops
  got = ablation.scores_of_drops(drops)
  for s in range(6):
    for l in range(3):
      d = drops[s, l]
      pos = [max(x, 0.0) for x in d]
      tot = sum(pos)
      want = 0.0 if tot <= 1e-12 else (max(pos) - sum(pos) / 8) / ((1 - 1 / 8) * tot)
      assert got["score_bounded"][s, l] == pytest.approx(want, abs=1e-12)
      assert -1e-12 <= got["score_bounded"][s, l] <= 1 + 1e-12
  assert got["score_bounded"][0, 0] == pytest.approx(got["score"][0, 0])
  assert (got["score"] > 1).any()  # the original definition leaves the range here


def test_fit_memory_picks_the_widest_candidate_that_fits():
  """Against brute force: among all (seed group, mask chunk) candidates, the
  choice fits and no fitting candidate does more work per batch; the search
  stops at the first fit; with nothing fitting, the narrowest."""
  import itertools
  cost = {}
  rng = np.random.default_rng(0)
  needs = lambda g, c: cost.setdefault((g, c), (g or 8) * (c or 6) * 100 + rng.integers(50))
  widths = lambda g, c: (g or 8) * min(c or 6, 6)
  for limit in (99, 150, 450, 1300, 2500, 5000):
    cost.clear()
    g, c, measured = ablation.fit_memory(needs, num_seeds=8, num_masks=6, limit_bytes=limit)
    every = list(itertools.product([None, 4, 2, 1], [None, 3, 2, 1]))
    fits = [gc for gc in every if needs(*gc) <= limit]
    if fits:
      assert needs(g, c) <= limit
      assert widths(g, c) == max(widths(*gc) for gc in fits)
      assert list(measured)[-1] == (g, c)
      assert all(needs(*gc) > limit for gc in list(measured)[:-1])
    else:
      assert (g, c) == (1, 1) and len(measured) == len(every)
  assert ablation.fit_memory(needs, num_seeds=8, num_masks=6, limit_bytes=10 ** 9)[:2] == (
      None, None)
  # a fixed choice restricts the search to it
  g, c, _ = ablation.fit_memory(needs, num_seeds=8, num_masks=6, limit_bytes=1300,
                                seed_groups=[2])
  assert g == 2 and c in (None, 3, 2, 1) and needs(g, c) <= 1300


def test_ablation_bytes_shrink_with_smaller_groups(trained):
  """XLA's measured bytes: one seed and one mask at a time need less than all
  at once (the reason --seed_group/--mask_chunk exist), and the memory
  options leave the accuracies unchanged."""
  tr, states, data = trained
  params, ids, labels = states["params"], data.test_ids, data.test_labels
  n = ablation.masks_per_batch(tr.model_cfg)
  assert n == tr.model_cfg.num_heads
  assert ablation.masks_per_batch(tr.model_cfg, leak=True) == (
      tr.model_cfg.num_layers * tr.model_cfg.num_heads)
  one = train.make_steps(tr.model_cfg, tr.task_cfg, tr.train_cfg, data.train_ids.shape[0],
                         seed_group=1)
  wide = ablation.ablation_bytes(tr, params, ids, labels)
  narrow = ablation.ablation_bytes(one, params, ids, labels, mask_chunk=1)
  assert 0 < narrow < wide
  calls = []
  for key, exe in list(ablation._COMPILED.items()):  # count runs of the measured executables
    ablation._COMPILED[key] = lambda *a, exe=exe, key=key: calls.append(key) or exe(*a)
  kept = set(ablation._COMPILED)
  a = ablation.ablate_heads(tr, params, ids, labels)
  b = ablation.ablate_heads(one, params, ids, labels, mask_chunk=1)
  np.testing.assert_allclose(b["ablated"], a["ablated"], atol=1e-6)
  # it ran the two executables it measured, compiling nothing new
  assert len(calls) == 2 and len(set(calls)) == 2 and set(ablation._COMPILED) == kept


@pytest.mark.long
def test_ablate_cli_writes_json_and_heatmap(sweep_reference, tmp_path):
  """Every command line in one process (conftest.run_cli_batch), each run
  that writes on its own copy of the reference run: the default, a budget
  nothing fits, a share of the free memory, bad flags, refused workdirs."""
  import json
  import os
  import shutil
  copies = {}
  for name in ("run", "tight", "share", "badckpt"):
    copies[name] = str(tmp_path / name)
    shutil.copytree(sweep_reference[0], copies[name])
  wd = copies["run"]
  # unverifiable checkpoints (both kept steps altered): refused in one line
  for step in os.listdir(os.path.join(copies["badckpt"], "ckpt")):
    with open(os.path.join(copies["badckpt"], "ckpt", step, "meta", "metadata"), "w") as f:
      f.write("{")
  nockpt = tmp_path / "nockpt"  # a config but no checkpoints: refused, nothing created
  nockpt.mkdir()
  (nockpt / "config.json").write_text(open(os.path.join(wd, "config.json")).read())
  bad_flags = ("--seed_group=0", "--mask_chunk=x", "--memory_gib=0", "--memory_fraction=0",
               "--memory_fraction=1.5")
  out, tight, share, *bads, indivisible, nothing, badckpt, nock = run_cli_batch(
      "experiments.ablate", [
          ([f"--workdir={wd}"], tmp_path),
          # a budget nothing fits: the narrowest program, said so, the same numbers
          ([f"--workdir={copies['tight']}", "--memory_gib=1e-6"], tmp_path),
          ([f"--workdir={copies['share']}", "--memory_fraction=1e-15"], tmp_path),
          *[([f"--workdir={wd}", flag], tmp_path) for flag in bad_flags],
          ([f"--workdir={wd}", "--seed_group=3"], tmp_path),
          ([f"--workdir={tmp_path}/nothing"], tmp_path),
          ([f"--workdir={copies['badckpt']}"], tmp_path),
          ([f"--workdir={nockpt}"], tmp_path)])
  assert out.returncode == 0, out.stderr[-2000:]
  with open(os.path.join(wd, "ablation.json")) as f:
    res = json.load(f)
  assert len(res["ablated"]) == 2 and len(res["ablated"][0]) == 2  # seeds, layers
  assert len(res["deposit_score_mean"]) == 2
  assert all(0 <= x <= 1 for row in res["deposit_score_bounded"] for x in row)
  for means, cis in ((res["deposit_score_mean"], res["deposit_score_ci95"]),
                     (res["deposit_score_bounded_mean"], res["deposit_score_bounded_ci95"]),
                     (res["max_drop_points_mean"], res["max_drop_points_ci95"])):
    for m, (lo, hi) in zip(means, cis):  # bootstrap intervals around the mean
      assert lo - 1e-9 <= m <= hi + 1e-9
  assert "checkpoint step 24;" in out.stdout
  for l, row in enumerate(res["mean_drop_points"]):  # the console names the heatmap's head
    assert f"layer {l}: head {int(np.argmax(row))} has the largest mean drop" in out.stdout
  with open(os.path.join(wd, "summary.json")) as f:
    summary = json.load(f)
  # the restored checkpoint reproduces the sweep's final test accuracy
  assert res["baseline"] == pytest.approx(summary["test_accuracy"], abs=1e-6)
  assert os.path.getsize(os.path.join(wd, "ablation.png")) > 1000
  assert "memory auto: --seed_group=2 --mask_chunk=2 fits" in out.stderr  # tiny: all at once
  assert tight.returncode == 0, tight.stderr[-2000:]
  assert "memory auto: --seed_group=1 --mask_chunk=1 does not fit either" in tight.stderr
  with open(os.path.join(copies["tight"], "ablation.json")) as f:
    np.testing.assert_allclose(json.load(f)["ablated"], res["ablated"], atol=1e-6)
  assert share.returncode == 0, share.stderr[-2000:]
  assert "--mask_chunk=1 does not fit either" in share.stderr
  assert "x memory_fraction=1e-15" in share.stderr
  for flag, bad in zip(bad_flags, bads):
    assert bad.returncode == 2 and bad.stderr.startswith("error:"), (flag, bad.stderr)
  assert indivisible.returncode == 2
  assert "--seed_group 3 must divide the run's 2 seeds" in indivisible.stderr
  # refused before restoring
  assert "analysing the checkpoint" not in indivisible.stdout + indivisible.stderr
  assert nothing.returncode == 2 and "error:" in nothing.stderr
  assert badckpt.returncode == 2 and "no usable checkpoint" in badckpt.stderr, \
      badckpt.stderr[-2000:]
  assert "Traceback" not in badckpt.stderr
  assert nock.returncode == 2 and "no checkpoint" in nock.stderr
  assert not (nockpt / "ckpt").exists()


@pytest.mark.parametrize("pe,faithful,dtype", [("rope", True, None), ("mla", False, None),
                                               ("rope", False, "bfloat16")])
def test_shared_prefix_equals_masked_model(pe, faithful, dtype):
  """The prefix-shared path equals the full masked model per mask (the reference),
  for both modes, with chunking; faithful mode takes keys/values from the input;
  a bfloat16 run's ablation runs in bfloat16 on both paths."""
  rc = configs.build("smoke", "distance", pe, faithful=faithful, steps=8)
  cfg = rc.model.replace(num_layers=3, num_heads=4, dtype=dtype)
  data = tasks.generate(rc.task)
  tr = train.make_steps(cfg, rc.task, rc.train.replace(eval_batch_size=96),
                        data.train_ids.shape[0])
  keys = train.seed_keys([3])
  states, _ = train.jit_chunk(tr)(train.jit_init(tr)(keys), keys, data.train_ids,
                                  data.train_labels, num_steps=8)
  ids, labels = data.test_ids[:200], data.test_labels[:200]  # 3 eval batches, padded
  # keep_only shares the same prefix code path: checked on one of the two models
  for mode in ("single", "keep_only") if faithful else ("single",):
    ref = ablation.ablate_heads(tr, states["params"], ids, labels, mode=mode,
                                method="masked")
    got = ablation.ablate_heads(tr, states["params"], ids, labels, mode=mode,
                                mask_chunk=3)
    np.testing.assert_allclose(got["baseline"], ref["baseline"], atol=1e-6)
    np.testing.assert_allclose(got["ablated"], ref["ablated"], atol=1e-6)
  assert np.abs(ref["ablated"] - ref["baseline"][:, None, None]).max() > 0
  with pytest.raises(ValueError, match="method"):
    ablation.ablate_heads(tr, states["params"], ids, labels, method="fast")


def test_frequency_ablation_equals_a_per_frequency_loop(trained):
  """Every (layer, head, pair) knock-out of the shared-prefix program against the
  full model evaluated once per mask in a Python loop (un-jitted masks)."""
  from pe_spectral.nn.model import apply_model
  tr, states, data = trained
  cfg = tr.model_cfg
  L, H, P = cfg.num_layers, cfg.num_heads, cfg.head_dim // 2
  ids, labels = data.test_ids[:96], data.test_labels[:96]
  res = ablation.ablate_frequencies(tr, states["params"], ids, labels)
  assert res["ablated"].shape == (2, L, H, P)
  np.testing.assert_allclose(res["frequencies"], cfg.rotary_frequencies())
  masked = ablation.ablate_frequencies(tr, states["params"], ids, labels, method="masked")
  np.testing.assert_allclose(masked["ablated"], res["ablated"], atol=1e-6)
  s = 1
  p = jax.tree.map(lambda x: x[s], states["params"])
  for l in range(L):
    for h in range(H):
      for k in range(P):
        m = jnp.ones((L, H, P)).at[l, h, k].set(0.0)
        correct, _, count = tr.score(apply_model(tr.graphdef, p, ids, freq_mask=m), labels)
        assert res["ablated"][s, l, h, k] == pytest.approx(float(correct / count), abs=1e-6)
  # the lowest frequencies barely turn over 20 tokens; the highest one matters somewhere
  assert np.abs(res["ablated"] - res["baseline"][:, None, None, None]).max() > 0


def test_masking_every_pair_is_theta_zero():
  """All pairs of every head masked = NoPE on the same parameters; all pairs of
  heads >= 1 masked = RoPE on head 0 only (partial_rope, k = 1)."""
  from pe_spectral.nn.model import ModelConfig, apply_model, init_model
  small = dict(vocab_size=23, num_classes=5, d_model=16, num_heads=2, num_layers=2,
               d_ff=32, max_len=12, dropout=0.0)
  g, params = init_model(ModelConfig(pe="rope", **small), jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (3, 12), 1, 23)
  zero = jnp.zeros((2, 2, 4))
  g_n, _ = init_model(ModelConfig(pe="nope", **small), jax.random.key(0))
  np.testing.assert_allclose(apply_model(g, params, ids, freq_mask=zero),
                             apply_model(g_n, params, ids), atol=1e-6)
  head0 = jnp.ones((2, 2, 4)).at[:, 1].set(0.0)
  g_p, _ = init_model(ModelConfig(pe="partial_rope", **small), jax.random.key(0))
  np.testing.assert_allclose(apply_model(g, params, ids, freq_mask=head0),
                             apply_model(g_p, params, ids), atol=1e-6)
  assert float(jnp.abs(apply_model(g, params, ids) - apply_model(g_n, params, ids)).max()) > 1e-4
  with pytest.raises(ValueError, match="freq_mask must be"):
    apply_model(g, params, ids, freq_mask=jnp.ones((2, 2, 3)))
  with pytest.raises(ValueError, match="need a rotation"):
    apply_model(g_n, params, ids, freq_mask=zero)


def test_seed_groups_report_progress_in_order(trained, capsys):
  """A grouped ablation prints one progress line per seed group, in order,
  with elapsed time and ETA; one vmap of all seeds prints none. The lines
  change no number (the grouped run equals the all-at-once one)."""
  tr, states, data = trained
  a = ablation.ablate_heads(tr, states["params"], data.test_ids, data.test_labels)
  assert "seed group" not in capsys.readouterr().err
  one = train.make_steps(tr.model_cfg, tr.task_cfg, tr.train_cfg, tr.num_train,
                         seed_group=1)
  for run in (ablation.ablate_heads, ablation.ablate_frequencies):
    run(one, states["params"], data.test_ids, data.test_labels)
    lines = [line for line in capsys.readouterr().err.splitlines() if "seed group" in line]
    assert [line.split(" done")[0] for line in lines] == [
        "ablation: seed group 1/2", "ablation: seed group 2/2"]
    assert "elapsed, ETA" in lines[0] and lines[1].endswith("ETA 0m00s")
  np.testing.assert_allclose(
      ablation.ablate_heads(one, states["params"], data.test_ids, data.test_labels)["ablated"],
      a["ablated"], atol=1e-6)


def test_minutes_seconds_format():
  from pe_spectral.runtime.timefmt import minutes_seconds
  assert [minutes_seconds(s) for s in (0, 9.99, 60, 95.4, 3600 + 61)] == [
      "0m00s", "0m09s", "1m00s", "1m35s", "61m01s"]

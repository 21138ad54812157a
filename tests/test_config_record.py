"""What ``config.json`` records: only the fields that apply to the run's PE and
task. The oracle is the model and the data themselves: a field left out must
change nothing that is computed, and one kept must change something."""
import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from pe_spectral.data import tasks
from pe_spectral.nn.model import PE_SCOPED, ModelConfig, apply_model, init_model
from pe_spectral.pe import encodings
from pe_spectral.training import config as configs
from pe_spectral.training import workdir

# A value for each scoped field that differs from every preset's (the
# rope_scaling trio and the PE options are refused for a PE they do not apply
# to, tested in test_model/test_new_pes).
_PERTURB = {"rope_base": 500.0, "relative_buckets": 4, "relative_max_distance": 3}


def _options_perturbed(cfg: ModelConfig) -> list:
  """``cfg`` with each option of its PE set to another value than it has; every
  one must change the model (a PE's options are refused for another PE)."""
  enc, opts = cfg.encoding, cfg.pe_options
  if isinstance(opts, encodings.MLAOptions):
    changes = [{"latent_dim": 4}, {"rope_dim": 4},
               {"shared_rope_query": not enc.shared_rope_query(cfg)},
               {"paper_rotary": not enc.paper_rotary(cfg)}]
  else:
    changes = {encodings.PartialRopeOptions: [{"heads": 0}],
               encodings.PRopeOptions: [{"fraction": 0.5}],
               encodings.XPosOptions: [{"gamma": 0.2}, {"scale_base": 64.0}],
               encodings.AlibiOptions: [{"slopes": "paper"}],
               encodings.FireOptions: [{"hidden": 8}],
               encodings.CoPEOptions: [{"positions": 10}],
               encodings.PoPEOptions: [{"learned_phase": False}],
               encodings.AlibiDataOptions: [{"gate_bias_init": 1.0}],
               encodings.ComRoPEOptions: [{"block": 2}, {"init_std": 0.5}],
               encodings.DAPEOptions: [{"width": 8}],
               encodings.PaTHOptions: [{"rank": 8}, {"conv": 1}],
               encodings.StickBreakingOptions: [{"attend_current": True}]}.get(type(opts), [])
  assert opts is None or changes, f"{cfg.pe}: no perturbation for {type(opts).__name__}"
  return [cfg.replace(pe_options=dataclasses.replace(opts, **c)) for c in changes]


_REFUSED = {"pe_options", "rope_scaling", "rope_scaling_factor", "rope_scaling_original_len",
            "rope_pairing"}


def _outputs(cfg: ModelConfig):
  graphdef, params = init_model(cfg, jax.random.key(0))
  ids = jax.random.randint(jax.random.key(1), (2, 12), 1, cfg.vocab_size)
  shapes = jax.tree.map(lambda x: x.shape, params)
  return shapes, params, np.asarray(apply_model(graphdef, params, ids))


def _same(a, b) -> bool:
  (sa, pa, la), (sb, pb, lb) = a, b
  if sa != sb:
    return False
  return (all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)))
          and np.array_equal(la, lb))


# faithful mode changes which scoped fields matter only for MLA (its shared
# rotary query and the paper's transform are on by default there)
@pytest.mark.parametrize("pe,faithful", [(pe, False) for pe in encodings.names()]
                         + [("mla", True)])
def test_recorded_fields_are_exactly_the_ones_that_matter(pe, faithful):
  cfg = configs.build("smoke", "distance", pe, faithful=faithful).model
  d = cfg.to_dict()
  own = set(cfg.encoding.config_fields)
  assert {k for k in d if k in PE_SCOPED} == own
  base = _outputs(cfg)
  # rebuilt from what config.json records: the same model
  assert _same(_outputs(ModelConfig(**d)), base)
  assert _same(_outputs(ModelConfig.from_dict(json.loads(json.dumps(d)))), base)
  for changed_cfg in _options_perturbed(cfg):
    assert not _same(_outputs(changed_cfg), base), \
        f"{pe}: {changed_cfg.pe_options} is recorded but changes nothing"
  if "rope_pairing" in own:  # refused where it does not apply (test_positional)
    assert not _same(_outputs(cfg.replace(rope_pairing="half")), base), \
        f"{pe}: rope_pairing is recorded but changes nothing"
  for field in sorted(_PERTURB):
    changed = _outputs(cfg.replace(**{field: _PERTURB[field]}))
    if field in own:
      assert not _same(changed, base), f"{pe}: {field} is recorded but changes nothing"
    else:
      assert _same(changed, base), f"{pe}: {field} changes the model but is not recorded"


@pytest.mark.parametrize("pe", encodings.names())
def test_refused_fields_are_recorded_only_where_they_apply(pe):
  enc = encodings.get(pe)
  d = configs.build("smoke", "distance", pe).model.to_dict()
  rotary = enc.qk_transform(configs.build("smoke", "distance", pe).model) is not None
  for field in _REFUSED:
    applies = ((field == "pe_options" and enc.options_type is not None)
               or (field.startswith("rope_scaling") and rotary)
               or (field == "rope_pairing" and "rope_pairing" in enc.reads))
    assert (field in d) == applies, (pe, field)


# the field of each task whose change must change its data
_OWN_KNOB = {"distance": "side_max", "count": "count_max"}


@pytest.mark.parametrize("task", tasks.TASKS)
def test_task_records_only_its_own_generator_fields(task, tmp_path):
  """A task's record has its own generator fields and no other task's; the
  others' fields do not change its data, its own do."""
  cfg = configs.task_config("smoke", task)
  d = cfg.to_dict()
  assert set(tasks.TASK_FIELDS) == set(tasks.TASKS)  # every task declares its own fields
  own = set(tasks.TASK_FIELDS[task])
  other = {f for fields in tasks.TASK_FIELDS.values() for f in fields} - own
  assert not other & set(d) and own <= set(d)
  # a corpus of its own (the lm task's knob; any other task must ignore it)
  for i in range(60):
    (tmp_path / f"doc{i}.txt").write_text(f"document {i}\n" * 40)
  moved = lambda f: str(tmp_path) if f == "corpus" else getattr(cfg, f) + 1
  base = tasks.generate(cfg)
  again = tasks.generate(tasks.TaskConfig(**d))
  changed = tasks.generate(cfg.replace(**{f: moved(f) for f in other}))
  if task == "lm":  # its data is the corpus it reads
    mine = tasks.generate(cfg.replace(corpus=str(tmp_path)))
  else:
    knob = _OWN_KNOB.get(task, "min_len")  # the string tasks: their length range
    step = -1 if task in _OWN_KNOB else 1
    mine = tasks.generate(cfg.replace(**{knob: getattr(cfg, knob) + step}))
  for d2 in (again, changed):
    np.testing.assert_array_equal(d2.train_ids, base.train_ids)
    np.testing.assert_array_equal(d2.train_labels, base.train_labels)
  assert not np.array_equal(mine.train_ids, base.train_ids)


def test_an_older_full_config_resumes_and_is_left_untouched(tmp_path):
  """Workdirs written before config.json was trimmed list every field: they
  compare equal through ``workdir.recorded`` and their file is not rewritten;
  a real change is still refused."""
  import dataclasses
  rc = configs.build("smoke", "distance", "rope")
  new = {"run": rc.to_dict(), "seeds": [0, 1], "eval_every": 6}
  full = dict(new, run=dict(rc.to_dict(), model=dataclasses.asdict(rc.model),
                            task=dataclasses.asdict(rc.task)))
  assert "relative_buckets" in full["run"]["model"]
  assert "relative_buckets" not in new["run"]["model"]
  assert workdir.config_diff(full, new) != []  # the raw files differ...
  assert workdir.config_diff(workdir.recorded(full), new) == []  # ...not the runs
  paths = {"config": str(tmp_path / "config.json"), "ckpt": str(tmp_path / "ckpt")}
  text = json.dumps(full, indent=1, sort_keys=True) + "\n"
  (tmp_path / "config.json").write_text(text)
  workdir.check_workdir(str(tmp_path), paths, new, resume=True)
  assert (tmp_path / "config.json").read_text() == text  # untouched
  lr = dict(new, run=dict(new["run"], train=dict(new["run"]["train"], learning_rate=0.5)))
  with pytest.raises(workdir.ConfigMismatchError, match="learning_rate"):
    workdir.check_workdir(str(tmp_path), paths, lr, resume=True)
  # a changed scoped field that applies is a change; one that does not, is not
  based = dict(new, run=dict(new["run"], model=dict(new["run"]["model"], rope_base=500.0)))
  assert workdir.config_diff(workdir.recorded(full), based) == [
      "run.model.rope_base: 10000.0 -> 500.0"]
  irrelevant = dict(full, run=dict(full["run"], model=dict(full["run"]["model"],
                                                             relative_buckets=4)))
  assert workdir.config_diff(workdir.recorded(irrelevant), new) == []


def test_every_overridable_field_parses_by_its_type_and_reaches_the_config():
  samples = {"int": "7", "float": "0.25", "bool": "true", "str": "x"}
  fields = configs.overridable_fields()
  assert ("model", "d_model") in fields and ("model", "pe") not in fields
  types = configs.field_types()
  for (section, name), kind in fields.items():
    base_type, optional = types[(section, name)]
    assert kind == (f"Optional[{base_type.__name__}]" if optional else base_type.__name__)
    value = configs.parse_override(section, name, samples[base_type.__name__])  # all known
    assert type(value) is base_type, (section, name, kind)
    if optional:
      assert configs.parse_override(section, name, "None") is None
  assert configs.parse_override("train", "b2", "1e-3") == 1e-3
  assert configs.parse_override("model", "causal", "no") is False
  for section, name, text, msg in [("model", "d_model", "9.5", "takes an int"),
                                   ("model", "causal", "maybe", "takes a bool"),
                                   ("model", "d_model", "none", "takes an int"),
                                   ("train", "epochs", "3", "use build\\(\\)'s epochs argument"),
                                   ("model", "num_classes", "3", "follows the task"),
                                   ("model", "nosuch", "1", "no such field")]:
    with pytest.raises(ValueError, match=msg):
      configs.parse_override(section, name, text)
  rc = configs.build("smoke", "count", "relative", overrides={
      "model": {"d_model": 32, "num_heads": 4, "relative_buckets": 8},
      "task": {"vocab_size": 80, "count_max": 8}, "train": {"b2": 0.99}})
  assert (rc.model.d_model, rc.model.num_heads, rc.model.relative_buckets) == (32, 4, 8)
  # the model follows the overridden task: its vocabulary and its label count
  assert rc.model.vocab_size == 80 and rc.model.num_classes == rc.task.num_labels == 9
  assert rc.train.b2 == 0.99
  with pytest.raises(configs.OverrideError, match="model.pe cannot be set: use build") as e:
    configs.build("smoke", "distance", "rope", overrides={"model": {"pe": "nope"}})
  assert e.value.argument == "pe"  # the programs map it to --pe (experiments.cli)


_STUDY_RUNS = "studies/arxiv_2505_13027/results/runs/distance"


@pytest.mark.parametrize("path", [f"{_STUDY_RUNS}/partial_rope-k2-study/config.json",
                                  f"{_STUDY_RUNS}/alibi-faithful-study/config.json",
                                  f"{_STUDY_RUNS}/rope-study/config.json"])
def test_a_committed_record_with_flat_options_reads_resumes_and_is_left_untouched(
    path, tmp_path):
  """Records written before the PE options were nested (``rope_heads``,
  ``alibi_slopes``... as flat fields, the oldest listing every PE's) read as
  the same config, compare equal to it and are not rewritten; a changed option
  is refused by its nested name."""
  import os
  here = os.path.join(os.path.dirname(__file__), "..", path)
  text = open(here).read()
  old = json.loads(text)
  flat = old["run"]["model"]
  assert "pe_options" not in flat and "alibi_slopes" in flat  # the old format
  rc = configs.RunConfig.from_dict(old["run"])
  want_heads = flat["rope_heads"] if flat["pe"] == "partial_rope" else None
  assert encodings.rope_heads_option(rc.model) == want_heads
  if flat["pe"] == "alibi":  # None: the mode's slopes (faithful: the paper's)
    assert rc.model.pe_options == encodings.AlibiOptions(slopes=None)
    assert rc.model.encoding.slope_scheme(rc.model) == "paper"
  new = dict(old, run=rc.to_dict())
  assert workdir.config_diff(workdir.recorded(old), new) == []
  (tmp_path / "config.json").write_text(text)
  paths = {"config": str(tmp_path / "config.json"), "ckpt": str(tmp_path / "ckpt")}
  workdir.check_workdir(str(tmp_path), paths, new, resume=True)
  assert (tmp_path / "config.json").read_text() == text  # untouched
  if want_heads is not None:
    other = rc.model.replace(pe_options={"heads": 1})
    changed = dict(new, run=dict(new["run"], model=other.to_dict()))
    assert workdir.config_diff(workdir.recorded(old), changed) == [
        "run.model.pe_options.heads: 2 -> 1"]
    with pytest.raises(workdir.ConfigMismatchError, match="pe_options.heads"):
      workdir.check_workdir(str(tmp_path), paths, changed, resume=True)


def test_pe_options_are_set_by_their_own_flags_and_refused_for_another_pe():
  rc = configs.build("smoke", "distance", "xpos",
                     overrides={"model": {"pe_options.gamma": 0.25}})
  assert rc.model.pe_options == encodings.XPosOptions(gamma=0.25, scale_base=512.0)
  assert rc.model.to_dict()["pe_options"] == {"gamma": 0.25, "scale_base": 512.0}
  assert configs.parse_override("model", "pe_options.positions", "none") is None
  assert configs.parse_override("model", "pe_options.hidden", "8") == 8
  for name, msg in [("pe_options.heads", "build\\(\\)'s rope_heads argument"),
                    ("pe_options.slopes", "build\\(\\)'s alibi_slopes argument"),
                    ("pe_options", "pe_options.<field>"),
                    ("pe_options.nosuch", "no such field")]:
    with pytest.raises(ValueError, match=msg):
      configs.parse_override("model", name, "1")
  with pytest.raises(ValueError, match="pe='rope' has no options"):
    configs.build("smoke", "distance", "rope", overrides={"model": {"pe_options.gamma": 0.25}})
  with pytest.raises(ValueError, match="PRopeOptions.*no field 'gamma'"):
    configs.build("smoke", "distance", "p_rope", overrides={"model": {"pe_options.gamma": 0.2}})
  # a run's name (the sweep's default workdir) names the option by its field
  spec = configs.RunSpec.of("distance", "xpos", preset="smoke",
                            settings={"model.pe_options.gamma": 0.25})
  assert spec.run_id() == "distance/xpos-smoke-gamma0.25"
  # equal options, however given, are one config (one cache entry, one record)
  a = configs.build("smoke", "distance", "partial_rope", rope_heads=1).model
  b = configs.build("smoke", "distance", "partial_rope").model
  c = b.replace(pe_options=encodings.PartialRopeOptions(heads=1))
  assert a == b == c and hash(a) == hash(c)


def test_a_new_pe_declares_its_options_and_they_reach_its_hooks():
  """The extension point: a PE's options are a frozen dataclass of its own;
  the config builds, validates, records and rebuilds them; the registry
  refuses anything else as an options type."""
  import jax.numpy as jnp

  @dataclasses.dataclass(frozen=True)
  class ScaleOptions:
    scale: float = 1.0

    def __post_init__(self):
      if not self.scale > 0:
        raise ValueError(f"ScaleOptions.scale must be > 0, got {self.scale}")

  class Scaled(encodings.PositionalEncoding):
    name = "test_scaled_bias"
    kinds = ("bias",)
    options_type = ScaleOptions

    def bias(self, cfg, params, seq_len):
      k = jnp.abs(jnp.arange(seq_len)[:, None] - jnp.arange(seq_len)[None])
      return -cfg.pe_options.scale * jnp.broadcast_to(k, (cfg.num_heads, seq_len, seq_len))

  encodings.register(Scaled())
  try:
    small = dict(vocab_size=11, num_classes=3, d_model=8, num_heads=2, num_layers=1,
                 d_ff=8, max_len=12, dropout=0.0)
    cfg = ModelConfig(pe="test_scaled_bias", pe_options={"scale": 0.5}, **small)
    assert cfg.pe_options == ScaleOptions(0.5) and cfg.to_dict()["pe_options"] == {"scale": 0.5}
    assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    base = _outputs(ModelConfig(pe="test_scaled_bias", **small))  # scale 1
    assert not _same(_outputs(cfg), base)
    with pytest.raises(ValueError, match="scale must be > 0"):
      ModelConfig(pe="test_scaled_bias", pe_options={"scale": 0.0}, **small)
  finally:
    encodings.unregister("test_scaled_bias")

  class Loose(encodings.PositionalEncoding):
    name = "test_loose_options"
    options_type = dict
  with pytest.raises(ValueError, match="options_type must be a frozen dataclass"):
    encodings.register(Loose())


def test_a_study_registers_its_presets_and_the_library_has_none_of_them():
  """register_preset adds a preset build() can use; the same values again are
  fine (a module imported twice), other values under that name are refused;
  a fresh process of the library knows only smoke, cpu and paper."""
  import subprocess
  import sys
  name = "test_tiny_preset"
  model = dict(configs.MODEL_PRESETS["smoke"], d_model=8)
  tasks = {"distance": configs.TASK_PRESETS[("smoke", "distance")]}
  train = dict(configs.TRAIN_PRESETS["smoke"], epochs=1)
  try:
    configs.register_preset(name, model=model, tasks=tasks, train=train)
    configs.register_preset(name, model=model, tasks=tasks, train=train)  # again: fine
    rc = configs.build(name, "distance", "rope")
    assert (rc.preset, rc.model.d_model, rc.train.epochs) == (name, 8, 1)
    with pytest.raises(ValueError, match="already registered"):
      configs.register_preset(name, model=dict(model, d_model=16), tasks=tasks, train=train)
    with pytest.raises(ValueError, match=f"preset '{name}' has no task 'count'; it has: "
                                         f"distance"):
      configs.build(name, "count", "rope")  # a task the preset does not have
  finally:
    configs.PRESET_NAMES.remove(name)
    configs.MODEL_PRESETS.pop(name)
    configs.TRAIN_PRESETS.pop(name)
    configs.TASK_PRESETS.pop((name, "distance"))
  code = ("from pe_spectral import config; print(','.join(config.PRESET_NAMES)); "
          "import studies.arxiv_2505_13027.presets; print(','.join(config.PRESET_NAMES))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=os.path.join(os.path.dirname(__file__), ".."))
  assert out.stdout.split() == ["smoke,cpu,paper", "smoke,cpu,paper,study,deposit,long"]


def test_a_run_spec_is_one_identity_for_its_name_and_its_configs():
  """config.RunSpec: its configs are build()'s for the same arguments, its
  name lists what it sets (prefixes first, the preset unless cpu), a tag
  renames without changing the run, and a field it cannot own is refused."""
  spec = configs.RunSpec.of("distance", "partial_rope", preset="smoke", faithful=True,
                            settings={"model.pe_options.heads": 2, "train.epochs": 3,
                                      "model.dropout": "0", "model.random_positions": 64})
  assert spec.run_id() == "distance/partial_rope-k2-rp64-faithful-smoke-dropout0.0-epochs3"
  assert spec.build(remat=True) == configs.build(
      "smoke", "distance", "partial_rope", faithful=True, rope_heads=2, epochs=3,
      random_positions=64, remat=True, overrides={"model": {"dropout": 0.0}})
  assert spec.variant == {"model.dropout": 0.0, "model.random_positions": 64,
                          "train.epochs": 3}
  tagged = dataclasses.replace(spec, tag="short")
  assert tagged == spec and tagged.name == "partial_rope-k2-rp64-faithful-smoke-short"
  assert configs.RunSpec.of("count", "rope").run_id() == "count/rope"
  for bad in ({"model.pe": "nope"}, {"model.remat": True}, {"model.nosuch": 1}):
    with pytest.raises(ValueError):
      configs.RunSpec.of("distance", "rope", settings=bad)
  with pytest.raises(ValueError, match="twice"):
    configs.RunSpec("distance", "rope", settings=(("model", "dropout", 0.0),
                                                  ("model", "dropout", 0.1)))

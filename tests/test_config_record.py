"""What ``config.json`` records: only the fields that apply to the run's PE and
task. The oracle is the model and the data themselves: a field left out must
change nothing that is computed, and one kept must change something."""
import json

import jax
import numpy as np
import pytest

from pe_spectral import config as configs
from pe_spectral import encodings, tasks, workdir
from pe_spectral.model import PE_OPTIONS, PE_SCOPED, ModelConfig, apply_model, init_model

# A value for each scoped field that differs from every preset's (the
# rope_scaling trio and the PE options are refused for a PE they do not apply
# to, tested in test_model/test_new_pes).
_PERTURB = {"rope_heads": 0, "rope_base": 500.0, "relative_buckets": 4,
            "relative_max_distance": 3, "mla_latent_dim": 4, "mla_rope_dim": 4}
_FLIPS = ("mla_shared_rope_query", "mla_paper_rotary")
_REFUSED = set(PE_OPTIONS) | {"rope_scaling", "rope_scaling_factor",
                              "rope_scaling_original_len"}


def _perturbed(cfg: ModelConfig, field: str) -> ModelConfig:
  if field in _FLIPS:
    current = cfg.shared_rope_query if field == "mla_shared_rope_query" else cfg.paper_rotary
    return cfg.replace(**{field: not current})
  return cfg.replace(**{field: _PERTURB[field]})


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
  for field in sorted(set(_PERTURB) | set(_FLIPS)):
    changed = _outputs(_perturbed(cfg, field))
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
    applies = field in enc.options or (field.startswith("rope_scaling") and rotary)
    assert (field in d) == applies, (pe, field)


@pytest.mark.parametrize("task", tasks.TASKS)
def test_task_records_only_its_own_generator_fields(task):
  cfg = configs.task_config("smoke", task)
  d = cfg.to_dict()
  assert set(tasks.TASK_FIELDS) == set(tasks.TASKS)  # every task declares its own fields
  other = tasks.COUNT_FIELDS if task == "distance" else tasks.DISTANCE_FIELDS
  assert not set(other) & set(d) and set(tasks.COUNT_FIELDS + tasks.DISTANCE_FIELDS) - set(other) <= set(d)
  base = tasks.generate(cfg)
  again = tasks.generate(tasks.TaskConfig(**d))
  changed = tasks.generate(cfg.replace(**{f: getattr(cfg, f) + 1 for f in other}))
  mine = tasks.generate(cfg.replace(**{
      ("side_max" if task == "distance" else "count_max"):
          getattr(cfg, "side_max" if task == "distance" else "count_max") - 1}))
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
  assert "mla_latent_dim" in full["run"]["model"] and "mla_latent_dim" not in new["run"]["model"]
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
                                                             mla_latent_dim=4)))
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
                                   ("train", "epochs", "3", "use --epochs"),
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
  with pytest.raises(ValueError, match="use --pe"):
    configs.build("smoke", "distance", "rope", overrides={"model": {"pe": "nope"}})

"""The study's presets, registered with the library on import
(``pe_spectral.training.config.register_preset``); the programs take them with
``--presets_from=studies.arxiv_2505_13027.presets`` (the plan passes it).

* ``study``: the ``cpu`` model with room for Task 2 at the paper's length
  (120 tokens, counts <= 100), 30 epochs;
* ``deposit``: redundancy for the deposit question, 8 heads of the paper's
  width 16 in 4 layers, so no single head is needed by construction;
* ``long``: the ``study`` model, data and learning rate with 3.3x its budget,
  for the groups that had not converged at ``study`` (study.md).

Task 1 is as at the ``cpu`` preset everywhere. Sizing: docs/presets.md.
"""
from pe_spectral.training import config

_DISTANCE = config.TASK_PRESETS[("cpu", "distance")]
_COUNT_120 = dict(vocab_size=574, num_examples=20_000, seq_len=120, max_len=120,
                  num_triggers=30, count_max=100)
_TASKS = {"distance": _DISTANCE, "count": _COUNT_120}
_TRAIN = dict(learning_rate=1e-3, b1=0.9, b2=0.98, batch_size=128, epochs=30,
              eval_batch_size=1000, train_eval_examples=2000)
_STUDY_MODEL = dict(d_model=64, num_heads=4, num_layers=2, d_ff=128, max_len=128)

config.register_preset("study", model=_STUDY_MODEL, tasks=_TASKS, train=_TRAIN)
config.register_preset("deposit", model=dict(d_model=128, num_heads=8, num_layers=4,
                                             d_ff=256, max_len=128),
                       tasks=_TASKS, train=_TRAIN)
config.register_preset("long", model=_STUDY_MODEL, tasks=_TASKS, train=dict(_TRAIN, epochs=100))

NAMES = ("study", "deposit", "long")
MODULE = __name__

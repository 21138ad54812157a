"""(How results/pilots/*/dropout_eval.json were made: python results/pilots/dropout_eval.py WORKDIR OUT.json)
Test accuracy of a Task 2 pilot in deterministic evaluation (dropout off, what
the runs report) against the same weights with dropout on (one draw, 3 keys) and
the average of 8 dropout draws' probabilities (MC dropout)."""
import json, sys
import jax, numpy as np
from pe_spectral import runner, model as M
wd, out = sys.argv[1], sys.argv[2]
lr = runner.load_run(wd, notify=print)
ids, lab = lr.data.test_ids, lr.data.test_labels
res = {"workdir": wd, "step": lr.step, "num_examples": int(ids.shape[0]), "seeds": lr.config["seeds"]}
rows = []
for s in range(len(lr.config["seeds"])):
  ps = jax.tree.map(lambda x: x[s], lr.states["params"])
  f = lambda key: M.apply_model(lr.steps.graphdef, ps, ids, dropout_key=key)
  acc = lambda lg: float((np.asarray(lg).argmax(-1) == np.asarray(lab)).mean())
  one = [acc(f(jax.random.key(100 + i))) for i in range(3)]
  mc = sum(jax.nn.softmax(f(jax.random.key(200 + i))) for i in range(8)) / 8
  rows.append({"eval_mode": acc(f(None)), "dropout_on": one, "mc_dropout_8": acc(mc)})
  print(s, rows[-1])
res["per_seed"] = rows
json.dump(res, open(out, "w"), indent=1)

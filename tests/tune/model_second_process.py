"""A later process running a tuned model: ``python model_second_process.py FACTORY MODE DB_URL`` prints JSON with
what each region ran, how many measurement workers and C++ compiles it started, and whether any tuning ran."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

import kernelgen  # noqa: F401  (installs the front end and the tuner hook)
from kernelgen.check import worker
from kernelgen.frontend import dynamo_backend
from kernelgen.tune import tuner
from kernelgen.tune.model import dispatched, load_model, prepare, step

counts = {"workers": 0, "compiles": 0, "tunings": 0}
real_init, real_run = worker.WorkerProcess.__init__, subprocess.run


def counting_init(self, *args, **kwargs):
    counts["workers"] += 1
    real_init(self, *args, **kwargs)


def counting_run(cmd, *args, **kwargs):
    if isinstance(cmd, (list, tuple)) and cmd and any(c in str(cmd[0]) for c in ("g++", "c++", "clang")) \
            and "--version" not in cmd:  # (the target's fingerprint asks the compiler's version: not a compile)
        counts["compiles"] += 1
    return real_run(cmd, *args, **kwargs)


def no_tuning(*args, **kwargs):
    counts["tunings"] += 1
    raise AssertionError("a tuned model must not tune again")


worker.WorkerProcess.__init__ = counting_init
subprocess.run = counting_run
tuner.tune_graph = no_tuning

factory, mode, url = sys.argv[1:4]
model, args, kwargs = load_model(factory)
prepare(model, mode)
want = step(model, args, kwargs, mode)()
dynamo_backend.register()
compiled = torch.compile(model, backend="kernelgen", options={"db": url})
with dynamo_backend.collect() as graphs:
    got = step(compiled, args, kwargs, mode)()
err = (got.detach() - want.detach()).abs().max().item()
print(json.dumps({**counts, "max_err": err, "regions": dispatched(graphs)}))

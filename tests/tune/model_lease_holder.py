"""One of several ``kernelgen tune --model`` processes sharing a database, for the lease tests:
``python model_lease_holder.py DB_URL MARKER STAGE`` tunes two regions (fake ones: no capture, four configs each,
0.2 s a measurement) through ``kernelgen.tune.model.tune_model`` and prints its result as JSON. While it measures
the first region's config ``a=2`` (STAGE ``search``) or its second confirmation measurement (``confirm``) it creates
``MARKER.measuring``, so a test can stop it (SIGSTOP) there; with ``--to-be-stopped`` it goes on from there once
``MARKER.woken`` exists. Log lines on
stderr carry their wall time (``LOG_TIME`` ...), so the time a take-over took can be read from them."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernelgen.db import open_db  # noqa: E402
from kernelgen.tune import claims, model  # noqa: E402
from kernelgen.tune.model import ModelRegion, ModelSpec, tune_model  # noqa: E402
from kernelgen.tune.model_capture import Captured  # noqa: E402
from kernelgen.tune.tuner import tune_graph  # noqa: E402
from tests.reliability.fakes import Counting, FourConfigs, add_graph  # noqa: E402

url, marker, stage = sys.argv[1:4]
to_be_stopped = "--to-be-stopped" in sys.argv[4:]  # (then it waits at the marker until MARKER.woken exists)
logging.basicConfig(level=logging.INFO, format="LOG_TIME %(created).3f %(levelname)s %(name)s: %(message)s")
REGIONS = [ModelRegion(add_graph(64), "pointwise", calls=1, aten_s=2e-3, share=0.6),
           ModelRegion(add_graph(96), "pointwise", calls=1, aten_s=1e-3, share=0.4)]


# The test stops this process once MARKER.measuring exists. A write of one of its daemon threads (a lease renewal,
# a trial's heartbeat) caught mid-transaction by the stop would keep the database's write lock (SQLite's, or
# PostgreSQL's row lock on the lease) for as long as the process is stopped, and no lease could change hands:
# a stop that lands there is not what these tests are about (kernelgen.db.engine's write queue bounds the wait;
# tests/db/test_db_concurrency.py). So those threads write only outside the window from the marker to the wake.
between_stops = threading.Lock()


def _outside_the_window(write):
    def gated(*args, **kwargs):
        with between_stops:
            return write(*args, **kwargs)
    return gated


claims.Lease._renew = _outside_the_window(claims.Lease._renew)
optuna.trial.Trial.set_user_attr = _outside_the_window(optuna.trial.Trial.set_user_attr)


class Slow(Counting):
    def __call__(self, impl, config):
        # (the search measures the four configs first: the sixth measurement is the confirmation's second)
        at = config["a"] == 2 if stage == "search" else len(self.calls) == 5
        if impl.graph.workload_key == REGIONS[0].key and at:
            with between_stops if to_be_stopped else contextlib.nullcontext():  # (once no write is under way)
                Path(f"{marker}.measuring").touch()
                while to_be_stopped and not Path(f"{marker}.woken").exists():
                    time.sleep(0.02)
        time.sleep(0.2)
        return super().__call__(impl, config)


def tune(graph, **kwargs):
    return tune_graph(graph, implementations=[FourConfigs(graph)], measure=Slow(), sampler="exhaustive", seed=0,
                      **kwargs)


model.capture = lambda spec, db: Captured(REGIONS, 5e-3, [], None, None)  # no model to run: no whole-step check
with open_db(url) as db:
    result = tune_model(ModelSpec("fake:regions"), db=db, trials=4, tune=tune, check_step=False)
print(json.dumps(result.to_json()))

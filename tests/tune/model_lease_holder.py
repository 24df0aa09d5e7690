"""One of several ``kernelgen tune --model`` processes sharing a database, for the lease tests:
``python model_lease_holder.py DB_URL MARKER STAGE`` tunes two regions (fake ones: no capture, four configs each,
0.2 s a measurement) through ``kernelgen.tune.model.tune_model`` and prints its result as JSON. While it measures
the first region's config ``a=2`` (STAGE ``search``) or its second confirmation measurement (``confirm``) it creates
``MARKER.measuring``, so a test can stop it (SIGSTOP) there. Log lines on
stderr carry their wall time (``LOG_TIME`` ...), so the time a take-over took can be read from them."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernelgen.db import open_db  # noqa: E402
from kernelgen.tune import model  # noqa: E402
from kernelgen.tune.model import ModelRegion, ModelSpec, tune_model  # noqa: E402
from kernelgen.tune.model_capture import Captured  # noqa: E402
from kernelgen.tune.tuner import tune_graph  # noqa: E402
from tests.reliability.fakes import Counting, FourConfigs, add_graph  # noqa: E402

url, marker, stage = sys.argv[1:4]
logging.basicConfig(level=logging.INFO, format="LOG_TIME %(created).3f %(levelname)s %(name)s: %(message)s")
REGIONS = [ModelRegion(add_graph(64), "pointwise", calls=1, aten_s=2e-3, share=0.6),
           ModelRegion(add_graph(96), "pointwise", calls=1, aten_s=1e-3, share=0.4)]


class Slow(Counting):
    def __call__(self, impl, config):
        # (the search measures the four configs first: the sixth measurement is the confirmation's second)
        at = config["a"] == 2 if stage == "search" else len(self.calls) == 5
        if impl.graph.workload_key == REGIONS[0].key and at:
            Path(f"{marker}.measuring").touch()
        time.sleep(0.2)
        return super().__call__(impl, config)


def tune(graph, **kwargs):
    return tune_graph(graph, implementations=[FourConfigs(graph)], measure=Slow(), sampler="exhaustive", seed=0,
                      **kwargs)


model.capture = lambda spec, db: Captured(REGIONS, 5e-3, [], None, None)  # no model to run: no whole-step check
with open_db(url) as db:
    result = tune_model(ModelSpec("fake:regions"), db=db, trials=4, tune=tune, check_step=False)
print(json.dumps(result.to_json()))

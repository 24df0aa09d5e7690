"""What tests of concurrent tuners assert about verdicts: never two for one workload and target, and where a
workload got none, a tuner's output says why.

A verdict's confirmation rounds rightly refuse to declare when the machine's load scatters them (more than
``TRIAL_AGREEMENT`` times the search trial, or busy in every round: ``tests/tune/test_confirm.py``). Tuners
racing on a two-core CI machine are that load, so "exactly one verdict" would test the machine, not the code.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Sequence

from kernelgen.db.verdict import NO_VERDICT
from kernelgen.ir.values import Evidence, TuningRecord


def assert_one_verdict_or_said_why(records: Iterable[TuningRecord], stdouts: Sequence[str], workloads: int) -> None:
    """``records``: the database's; ``stdouts``: each tuner's ``--json`` output; ``workloads``: how many were tuned."""
    verdicts = collections.Counter((r.workload_key, r.target_fingerprint) for r in records
                                   if r.evidence is Evidence.DECLARED)
    assert set(verdicts.values()) <= {1}, verdicts  # tuned once, by the team: never a verdict per process
    declared = {key for key, _ in verdicts}
    refused = {r["workload_key"] for out in stdouts for w in json.loads(out)["workloads"] for r in w["results"]
               if r["note"].startswith(NO_VERDICT)}
    assert len(declared) + len(refused - declared) == workloads, (verdicts, refused)

"""Interleaved confirmation: the finalists of a tuning, the default config and eager PyTorch re-measured side by
side in rounds, until the leader's time can be trusted or a bounded number of rounds says it cannot.

A config other than a default (a template's default config, the graph's own ATen ops) is declared only when
it beats the fastest default by more than the rounds' measured spread (``round_spread``); within it, the default
stays. The tuner's verdict, its "vs default", its "vs eager" and its "vs torch.compile" all come out of one ``confirm``
call, so the times are taken in the same minutes under the same load, never minutes apart. The baselines'
times (``kernelgen.ir.values.Reference``) are kept in every record of the rounds, for the report. A leader whose
confirmed time stays far above what the search measured for it gets no verdict: its records say why, and a
later run of the tuner confirms again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kernelgen.check.baselines import EAGER, ReferenceSkipped
from kernelgen.check.measure import UNSTEADY
from kernelgen.check.measure import is_unsteady
from kernelgen.db.verdict import NO_VERDICT
from kernelgen.ir.values import (CONFIRM_PREFIX, DECLARED_PREFIX, Evidence, Measurement, Reference, Status, TimeStats,
                                 TuningRecord)

H = TypeVar("H")  # a finalist: a config of one implementation, or (implementation, config) in a showdown
CONFIRM_ROUNDS = 3  # interleaved rounds at least: slow drifts of a noisy machine hit every candidate alike
MAX_ROUNDS = 6  # at most, while the leader's time is in doubt (each round re-measures every finalist)
TIE_TOLERANCE = 0.01  # confirmed times this close are a tie, won by a default config, then by the tie key
# A verdict's time may be at most this multiple of what the search measured for the same config. Beyond it,
# one of the two was disturbed; more rounds usually find a quiet moment, else no verdict is declared.
TRIAL_AGREEMENT = 1.5


@dataclass(frozen=True)
class Finalist(Generic[H]):
    """One candidate of the rounds: what identifies it, how to measure it once, what the search saw."""

    item: H
    measure: Callable[[], Measurement]
    trial: float | None = None  # the fastest search-trial median of the same config, if any
    default: bool = False  # a template default: it wins ties, so only a measurable gain replaces it


@dataclass
class Confirmation(Generic[H]):
    """What ``confirm`` found. ``results`` holds the finalists that ran ok in every round, each with the
    robust statistic as its ``time.median``; ``winner`` indexes it. ``doubt`` is why the winner's time
    cannot be trusted ("" when it can); ``caveat`` a weaker warning that still allows a verdict.
    ``references`` holds each baseline timed in the rounds (``eager`` repeats the eager one's time)."""

    results: list[tuple[H, Measurement]]
    winner: int | None
    eager: TimeStats | None
    rounds: int
    measured: int = 0  # measurements taken (finalists and baselines)
    doubt: str = ""
    caveat: str = ""
    references: tuple[Reference, ...] = ()
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])  # names these rounds in every record

    @property
    def note(self) -> str:
        return f"{NO_VERDICT}: {self.doubt}" if self.doubt else self.caveat


def robust_time(rounds: Sequence[TimeStats]) -> TimeStats:
    """One candidate's time over the rounds: the smallest of its round medians.

    Contention only ever adds time: a disturbed round is slower, never faster. The median within a round
    already ignores spikes that hit a minority of its repeats; taking the smallest round median then ignores
    rounds that were disturbed throughout. Every candidate gets the same rounds, interleaved, so each has the
    same chances of a quiet one and the minimum favours none. (A median over rounds, by contrast, follows
    the load as soon as it lasts for half of them: that is how a 20 us kernel was once recorded at 20 ms.)
    ``spread`` is then the relative distance from the fastest round median to the slowest.
    """
    meds = [t.median for t in rounds]
    best = min(meds)
    return TimeStats(median=best, min=min(t.min for t in rounds),
                     spread=(max(meds) - best) / best if best > 0 else 0.0, repeats=sum(t.repeats for t in rounds))


def fastest(results: Sequence[tuple[H, Measurement]], tie_key: Callable[[H], Any]) -> int | None:
    """Index of the fastest result: times within TIE_TOLERANCE of the fastest tie, and the smallest
    ``tie_key`` among them wins, so the verdict does not flip on noise. None when empty."""
    if not results:
        return None
    best = min(m.time.median for _, m in results)  # type: ignore[union-attr]
    tied = [i for i, (_, m) in enumerate(results)
            if m.time.median <= best * (1 + TIE_TOLERANCE)]  # type: ignore[union-attr]
    return min(tied, key=lambda i: tie_key(results[i][0]))


def confirm(finalists: Sequence[Finalist[H]], tie_key: Callable[[H], Any], *,
            eager: Callable[[], TimeStats | None] | None = None,
            references: Mapping[str, Callable[[], TimeStats | None]] | None = None, rounds: int = CONFIRM_ROUNDS,
            max_rounds: int = MAX_ROUNDS) -> Confirmation[H]:
    """Measure ``finalists`` and the baselines (``eager``, ``references`` by name) once per round in a rotating
    order, at least ``rounds`` rounds and while the leader is in doubt at most ``max_rounds``. A finalist that
    fails once drops out; a baseline that raises ``ReferenceSkipped`` too, its reason kept. A baseline that
    returns None (an unsteady timing) just misses that round. Defaults win ties (``fastest`` with
    ``(not default, tie_key)``), and a config that is not a default wins only by a margin over the fastest
    default beyond both one's ``round_spread``: while it is within, more rounds, and at ``max_rounds`` the
    default stays (said in ``caveat``). Nothing is committed here.
    """
    n = len(finalists)
    baselines = {**({EAGER: eager} if eager is not None else {}), **(references or {})}
    names = list(baselines)
    runs: list[list[Measurement]] = [[] for _ in finalists]
    baseline_runs: dict[str, list[TimeStats]] = {name: [] for name in names}
    skipped: dict[str, str] = {}
    failed: set[int] = set()
    slots = list(range(n + len(names)))  # slot n + k: the k-th baseline
    done = measured = 0
    kept_default = ""
    while True:
        for j in range(len(slots)):
            slot = slots[(j + done) % len(slots)]
            if slot >= n:
                name = names[slot - n]
                if name not in skipped:
                    measured += 1
                    try:
                        t = baselines[name]()
                    except ReferenceSkipped as exc:
                        skipped[name] = str(exc)
                    else:
                        if t is not None:
                            baseline_runs[name].append(t)
                continue
            if slot not in failed:
                measured += 1
                m = finalists[slot].measure()
                if m.ok and m.time is not None:
                    runs[slot].append(m)
                else:
                    failed.add(slot)
        done += 1
        if done < rounds:
            continue
        kept = [i for i in range(n) if i not in failed and runs[i]]
        summaries = [(i, _summary(runs[i])) for i in kept]
        winner = fastest(summaries, lambda i: (not finalists[i].default, tie_key(finalists[i].item)))
        # A config replaces the default only by a margin its rounds can show: within the measured spread, more
        # rounds (up to max_rounds), then the default stays and is the verdict.
        incumbent, close = _incumbent(finalists, kept, summaries, runs, winner)
        if close and done >= max_rounds:
            kept_default = (f"the fastest config ({summaries[winner][1].time.median:.3g} s) was within the rounds' "
                            f"spread of the default ({summaries[incumbent][1].time.median:.3g} s) after {done} "
                            "rounds: the default stays")  # type: ignore[union-attr,index]
            winner = incumbent
        doubt, caveat = ("", "") if winner is None else _doubts(finalists[kept[winner]], runs[kept[winner]],
                                                                summaries[winner][1])
        if not (doubt or caveat or close) or done >= max_rounds:
            break
    results = [(finalists[i].item, m) for i, m in summaries]
    if winner is not None:
        disturbed = _disturbed_search(finalists[kept[winner]], summaries[winner][1])
        caveat = "; ".join(filter(None, [caveat, disturbed, kept_default]))
    refs = tuple(Reference(name, robust_time(baseline_runs[name]) if baseline_runs[name] else None,
                           skipped.get(name) or ("" if baseline_runs[name] else f"no steady timing in {done} rounds"))
                 for name in names)
    eager_time = next((r.time for r in refs if r.name == EAGER), None)
    return Confirmation(results, winner, eager_time, done, measured, doubt, caveat, references=refs)


def round_spread(runs: Sequence[Measurement]) -> float:
    """How reproducible one finalist's robust time (its fastest round median, ``robust_time``) is: how far its
    second-fastest round median lands above the fastest, relative. The noise a margin must exceed to mean
    anything (the same kernel in two columns of one GPU bench differed by 5.8%, 69.1 vs 73.1 us). Rounds
    disturbed by load do not count as long as two were quiet, and more rounds can only narrow it; a finalist
    measured once has no spread to tell (0)."""
    meds = sorted(m.time.median for m in runs if m.time is not None)
    if len(meds) < 2 or meds[0] <= 0:
        return 0.0
    return meds[1] / meds[0] - 1


def _incumbent(finalists: Sequence[Finalist[Any]], kept: Sequence[int], summaries: Sequence[tuple[int, Measurement]],
               runs: Sequence[Sequence[Measurement]], winner: int | None) -> tuple[int | None, bool]:
    """``(the fastest default's index in summaries, whether the winner's margin over it is within the spread)``:
    a non-default winner must beat the fastest default (a template's default, ATen's ops) by more than
    ``TIE_TOLERANCE`` and more than either one's ``round_spread``, else the default stays."""
    if winner is None or finalists[kept[winner]].default:
        return winner, False
    defaults = [j for j, (i, _) in enumerate(summaries) if finalists[i].default]
    if not defaults:
        return winner, False
    best = min(defaults, key=lambda j: summaries[j][1].time.median)  # type: ignore[union-attr]
    t_win, t_def = summaries[winner][1].time.median, summaries[best][1].time.median  # type: ignore[union-attr]
    spread = max(TIE_TOLERANCE, round_spread(runs[kept[winner]]), round_spread(runs[kept[best]]))
    return best, t_win <= 0 or t_def / t_win - 1 <= spread


def _summary(runs: Sequence[Measurement]) -> Measurement:
    last = runs[-1]
    stats = robust_time([m.time for m in runs if m.time is not None])
    return Measurement(config=last.config, status=Status.OK, time=stats, threads=last.threads)


def _doubts(finalist: Finalist[Any], runs: Sequence[Measurement], summary: Measurement) -> tuple[str, str]:
    """(doubt, caveat) about the leader after the rounds so far: a doubt asks for more rounds and refuses the
    verdict once they are spent (a caveat would ask for more rounds but let the verdict stand)."""
    assert summary.time is not None
    t, trial = summary.time.median, finalist.trial
    doubt = ""
    if trial is not None and trial > 0 and t > TRIAL_AGREEMENT * trial:
        doubt = (f"the leader's confirmed time {t:.3g} s is {t / trial:.1f}x its search trial's {trial:.3g} s "
                 f"(more than {TRIAL_AGREEMENT}x) after {len(runs)} rounds")
    if not doubt and all(is_unsteady(m) for m in runs):
        # Not one quiet round: its time, and any ratio against the default or eager from these rounds, is the
        # machine's load (OpenMP threads waiting for a CPU another process holds), not the kernel's.
        doubt = (f"the machine was busy in every one of the leader's {len(runs)} rounds ({_why(runs[-1])}); "
                 "run `kernelgen tune` again when it is quieter (it confirms again without searching)")
    return doubt, ""


def _disturbed_search(finalist: Finalist[Any], summary: Measurement) -> str:
    """A leader confirmed far faster than its search trial: the verdict stands (contention only slows), but
    the search that picked the finalists ran under load and may have passed over faster configs."""
    t, trial = summary.time.median, finalist.trial  # type: ignore[union-attr]
    if trial is None or t <= 0 or trial <= TRIAL_AGREEMENT * t:
        return ""
    return (f"the leader's search trial {trial:.3g} s was {trial / t:.1f}x its confirmed time: "
            "the search ran under load")


def _why(m: Measurement) -> str:
    return m.message[m.message.find(UNSTEADY):]


def commit_confirmation(conf: Confirmation[H], declare: bool,
                        commit: Callable[[H, Measurement, Evidence], TuningRecord],
                        what: str, state: Any = None) -> list[TuningRecord]:
    """Commit ``confirm``'s results: the winner with ``DECLARED_PREFIX`` when ``declare`` and nothing is in
    doubt (the tuner's verdict, which ``best()`` ranks first), everything else as a confirmed finalist.
    Every message names the rounds (``kernelgen.db.verdict.rounds_tag`` reads it back) and, when a verdict was due but refused, why. ``commit``
    gets the record's evidence too: it is a field of the record, the message prefix only says it to people."""
    out = []
    for i, (finalist, m) in enumerate(conf.results):
        declared = declare and i == conf.winner and not conf.doubt
        prefix, evidence = (DECLARED_PREFIX, Evidence.DECLARED) if declared else (CONFIRM_PREFIX, Evidence.CONFIRMED)
        message = (f"{prefix}: fastest round median of {conf.rounds} interleaved rounds (rounds {conf.tag}) "
                   f"against {what}")
        if declare and conf.note:
            message += f"; {conf.note}"
        record = commit(finalist, Measurement(config=m.config, status=Status.OK, time=m.time, message=message,
                                              threads=m.threads, references=conf.references), evidence)
        out.append(record)
        if state is not None:
            state.report(record, measured=True, phase="confirm")
    return out


__all__ = ["CONFIRM_ROUNDS", "Confirmation", "Finalist", "MAX_ROUNDS", "TIE_TOLERANCE", "TRIAL_AGREEMENT",
           "commit_confirmation", "confirm", "fastest", "robust_time", "round_spread"]

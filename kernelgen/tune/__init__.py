"""Autotuning: search over a template's SearchSpace (Optuna), budgets, replay of recorded landscapes."""

from kernelgen.tune.landscape import Landscape, LandscapeError, load_landscape, replay
from kernelgen.tune.search import SAMPLERS, SearchResult, Searcher, run_search
from kernelgen.tune.manifest import Workload, load_manifest
from kernelgen.tune.measure import TimingPolicy
from kernelgen.tune.tuner import TrialEvent, TuneResult, tune_graph, tune_workload

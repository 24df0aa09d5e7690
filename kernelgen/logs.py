"""The one place kernelgen attaches a logging handler: ``configure(level)``, used by the CLI's ``-v/-q``
and by the ``KERNELGEN_LOG`` environment variable (``debug``, ``info`` or ``warning``).

Every module logs to its own ``logging.getLogger(__name__)`` under the ``kernelgen`` logger and never adds
handlers itself, so an application that configures ``logging`` sees kernelgen's records as usual.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from kernelgen.errors import KernelgenError

ENV = "KERNELGEN_LOG"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
TRIAL_LOGGER = "kernelgen.tune.trial_loop"  # logs one INFO line per trial
_state = {"quiet": False}
_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"


class _Handler(logging.StreamHandler):
    """The handler ``configure`` owns (calling it twice replaces it instead of doubling lines). It writes to
    the ``sys.stderr`` of the moment, so a replaced stderr (pytest's capture, a redirect) still works."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def level_named(name: str) -> int:
    """The ``logging`` level called ``name`` (case-insensitive); raises ``KernelgenError`` naming the choices."""
    level = LEVELS.get(name.strip().lower())
    if level is None:
        raise KernelgenError(f"{ENV}={name!r} is not a log level; use one of {', '.join(LEVELS)}")
    return level


def configure(level: int | str) -> None:
    """Send ``kernelgen`` records at ``level`` and above to stderr, one line each (idempotent)."""
    if isinstance(level, str):
        level = level_named(level)
    logger = logging.getLogger("kernelgen")
    for handler in [h for h in logger.handlers if isinstance(h, _Handler)]:
        logger.removeHandler(handler)
    handler = _Handler()
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(level)


def configure_cli(verbose: int, quiet: bool) -> None:
    """The CLI's ``-v`` (INFO), ``-vv`` (DEBUG) and ``-q`` (ERROR); without them ``KERNELGEN_LOG`` or WARNING."""
    if quiet:
        configure(logging.ERROR)
    elif verbose:
        configure(logging.DEBUG if verbose > 1 else logging.INFO)
    else:
        configure(os.environ.get(ENV, "").strip() or logging.WARNING)
    _state["quiet"] = quiet


def quiet() -> bool:
    """True when the CLI was asked for ``-q``: commands print no progress either."""
    return _state["quiet"]


def show_trial_lines() -> None:
    """Let the per-trial INFO lines through even at the default level (piped ``kernelgen tune``)."""
    if not quiet():
        logging.getLogger(TRIAL_LOGGER).setLevel(logging.INFO)


def configure_from_env() -> None:
    """Apply ``KERNELGEN_LOG`` when it is set; an unknown value warns once instead of breaking ``import``."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return
    try:
        configure(value)
    except KernelgenError as exc:
        logging.getLogger(__name__).warning("%s", exc)

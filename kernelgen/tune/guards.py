"""Guards around the code a user hands ``kernelgen tune`` and ``kernelgen report --model`` (a module imported to find a
function, a model factory, a model's step): whatever it does, the command ends in one line that names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kernelgen.errors import KernelgenError


@contextlib.contextmanager
def contained(what: str, fix: str, error: type[KernelgenError]) -> Iterator[None]:
    """Run user code: a ``sys.exit`` in it, or a ``BaseException`` that is not an ``Exception``, becomes ``error``
    naming ``what`` (``fix`` says what to change after an exit). An exit would otherwise end kernelgen with the
    user's status (0: a tune that tuned nothing passes CI, with no output) and any other ``BaseException`` would
    print a traceback. Ctrl-C still interrupts; an ``Exception`` passes unchanged, for the caller to word."""
    try:
        yield
    except (Exception, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        raise error(f"{what} called sys.exit({exc.code!r}); {fix}") from None
    except BaseException as exc:
        detail = f": {exc}" if str(exc) else ""
        raise error(f"{what} raised {type(exc).__name__} (a BaseException){detail}") from None


__all__ = ["contained"]

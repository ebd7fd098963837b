"""The ``ledger-deletion`` command line: one module per command group, assembled in ``main``.

Ctrl-C while the command line is still importing (typer, rich, pydantic: a few hundred ms)
would end in a ``KeyboardInterrupt`` traceback from whatever module was loading.  So when
this package is loaded to run the CLI (the console script, or ``python -m``), the first
thing it does is make Ctrl-C print one line and exit 130; ``main`` restores Python's own
handler once it runs, so commands clean up in their ``finally`` blocks as usual.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType


def _interrupted_while_loading(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("interrupted\n")
    os._exit(130)  # nothing to clean up yet


if sys.argv and (sys.argv[0] == "-m" or Path(sys.argv[0]).name == "ledger-deletion"):
    signal.signal(signal.SIGINT, _interrupted_while_loading)

"""Third-party noise out of piped output: in a pipe or a log file (stdout not a terminal), transformers' and
the hub's progress bars ("Loading weights", downloads), their info/warning log lines (a tokenizer's
400-character notice) and other packages' Python warnings are left out, so a ``grae compare … | tee`` log holds
grae's own lines. ``--verbose`` anywhere on the command line (or ``GRAE_VERBOSE=1``) keeps all of it; a
terminal keeps it too. Set before any of those packages is imported (the commands import them lazily), and
inherited by the ``grae train`` processes ``grae compare`` starts (their ``train.log`` is a file)."""

from __future__ import annotations

import os
import sys
import warnings

#: the environment variable ``--verbose`` sets (and child processes inherit)
VERBOSE_ENV = "GRAE_VERBOSE"
#: what is set where third-party output is kept out (each only where the user has not set it)
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub's bars, and transformers' (it reads the hub's switch)
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
    "TQDM_DISABLE": "1",  # other tqdm bars (transformers' GGUF conversion of the smollm2 preset); grae's bars are rich's
}


def take_verbose(argv: list[str]) -> list[str]:
    """``argv`` without ``--verbose`` (it may stand anywhere: it is no config key); sets :data:`VERBOSE_ENV`
    when it was there."""
    if "--verbose" in argv:
        os.environ[VERBOSE_ENV] = "1"
    return [a for a in argv if a != "--verbose"]


def quiet_third_party(stream=None) -> bool:
    """Keep third-party bars, log lines and warnings out where ``stream`` (stdout) is not a terminal and
    verbose output was not asked for; True when it did."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get(VERBOSE_ENV, "") not in ("", "0") or _is_terminal(stream):
        return False
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", module=r"(?!grae(\.|$))")  # other packages' warnings; grae's own stay
    return True


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

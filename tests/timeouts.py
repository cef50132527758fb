"""Time limits for the tests' subprocesses and waits, scaled for a loaded machine.

A limit in a test bounds a hang; it measures nothing. Every ``timeout=`` a test gives a subprocess, a
``pytest.mark.timeout``, a polling deadline and the 2-process runs' collective timeout go through
:func:`scaled`, so a busy machine gives a test that would pass proportionally longer, and a hang still
fails (every limit stays finite).

The factor is ``GRAE_TEST_TIMEOUT_FACTOR`` when it is set (e.g. ``3`` on a CI runner shared with other
jobs; ``1`` for the bare limits). Unset, it is the machine's load per core, the largest of the 1-, 5- and
15-minute load averages over the CPU count, between 1 and :data:`MAX_LOAD_FACTOR`: on 2 cores at a load
average of 6 a 600-s limit becomes 1,800 s. It is read once per process, so a test's own limit and the
limits of the subprocesses it waits for scale together.
"""

from __future__ import annotations

import functools
import os

ENV = "GRAE_TEST_TIMEOUT_FACTOR"
MAX_LOAD_FACTOR = 8.0


@functools.cache
def factor() -> float:
    """The multiplier for every limit (see the module docstring)."""
    raw = os.environ.get(ENV)
    if raw is not None:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{ENV}={raw!r}: expected a number >= 1, e.g. {ENV}=3") from None
        if not value >= 1:
            raise ValueError(f"{ENV}={raw!r}: expected a number >= 1 (it only lengthens limits), e.g. {ENV}=3")
        return value
    try:
        load = max(os.getloadavg())
    except OSError:  # no load average on this platform
        return 1.0
    return min(MAX_LOAD_FACTOR, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float) -> float:
    """``seconds`` times :func:`factor`: the limit for a machine as loaded as this one."""
    return seconds * factor()

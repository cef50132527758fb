"""Float comparisons whose absolute tolerance scales with the tensor compared.

A fixed ``atol`` holds on the machine it was tuned on: the same computation summed in another order (another
CPU's vector width, another thread count) rounds differently by an amount proportional to the magnitudes
involved, so an entry near 0 of a tensor whose scale is 60 can differ by 1e-5 relative to 60, far beyond a
fixed 1e-5 (seen: one of 131,072 embedding-gradient entries, 5.4e-5 off where the tensor's max is 61.7, on
an Intel Xeon). :func:`assert_close_scaled` takes ``atol = rel × max |expected|``, so a tolerance means the
same on every CPU and thread count.

Every float comparison in ``tests/`` either goes through :func:`assert_close_scaled` (or an atol that multiplies
by a magnitude of the values) or keeps a fixed tolerance with a ``# tol: <why>`` comment saying why it means the
same on every CPU (probabilities in float64, exact rationals, order-1 closed forms, rounded values);
``tests/test_tolerance_audit.py`` fails listing any other (the rule: ``tests/tolerance_audit.py``). The suite
passes at 1 and at 2 torch threads (``make test TEST_THREADS=2``); :func:`threads` runs one test at both.
"""

from __future__ import annotations

import pytest
import torch


def assert_close_scaled(actual, expected, *, rel: float, scale: float | None = None, msg: str | None = None) -> None:
    """``actual`` equals ``expected`` entry by entry within ``rel`` relative to the entry and ``rel`` × the
    tensor's largest magnitude (an all-zero ``expected`` must be matched exactly).

    ``scale`` replaces that magnitude where the compared values are a small result of large terms (a sum of
    advantages that cancels to 0, a loss whose tokens' terms are large): pass the terms' magnitude.
    Python numbers, lists and numpy arrays are compared as float64 tensors (dtypes are then not checked)."""
    as_tensors = not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor))
    actual, expected = (x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float64)
                        for x in (actual, expected))
    if scale is None:
        scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rel, atol=rel * scale, msg=msg, check_dtype=not as_tensors)


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    """Runs the test at 1 and at 2 torch threads (another summation order), then restores the count."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)

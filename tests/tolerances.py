"""Float comparisons whose absolute tolerance scales with the tensor compared.

A fixed ``atol`` holds on the machine it was tuned on: the same computation summed in another order (another
CPU's vector width, another thread count) rounds differently by an amount proportional to the magnitudes
involved, so an entry near 0 of a tensor whose scale is 60 can differ by 1e-5 relative to 60, far beyond a
fixed 1e-5 (issue 48: one of 131,072 embedding-gradient entries, 5.4e-5 off where the tensor's max is 61.7, on
an Intel Xeon). :func:`assert_close_scaled` takes ``atol = rel × max |expected|``, so a tolerance means the
same on every CPU and thread count.
"""

from __future__ import annotations

import pytest
import torch


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, *, rel: float, msg: str | None = None) -> None:
    """``actual`` equals ``expected`` entry by entry within ``rel`` relative to the entry and ``rel`` × the
    tensor's largest magnitude (an all-zero ``expected`` must be matched exactly)."""
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rel, atol=rel * scale, msg=msg)


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    """Runs the test at 1 and at 2 torch threads (another summation order), then restores the count."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)

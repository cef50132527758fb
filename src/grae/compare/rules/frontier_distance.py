"""The distance of an arm above the baseline's checkpoint frontier for compare's rules: the computation is
:mod:`grae.eval.frontier_distance` (the temperature frontier of ``grae train`` shares it); its names are importable
from here too."""

from __future__ import annotations

from grae.eval.frontier_distance import FrontierDistance, distance_cells, frontier_distance

__all__ = ["FrontierDistance", "distance_cells", "frontier_distance"]

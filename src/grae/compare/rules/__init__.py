"""The decision rules a study can name (study key ``rule:``), one package:

* :mod:`~grae.compare.rules.spec` — each rule's keys, types and study-level checks, read when a study loads
  (it imports no statistics, so ``grae.compare.grid`` can sit above it);
* :mod:`~grae.compare.rules.keeps_passk` — does an arm keep pass@k while staying near the baseline's pass@1,
  above the baseline's checkpoint frontier (:mod:`~grae.compare.rules.frontier_distance`: the distance's crossed
  interval);
* :mod:`~grae.compare.rules.every_k` — ``non_inferior_every_k``: is one arm at least the baseline at every k;
* :mod:`~grae.compare.rules.common` — what they share (Holm's level, the margin's p, what would decide);
* :mod:`~grae.compare.rules.registry` — each rule's four pure functions of the table, by name (the report's).

This module imports nothing, so loading a study (``spec``) does not load the rules' statistics.
"""

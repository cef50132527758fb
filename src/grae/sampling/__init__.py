"""Where rollouts are spent: DAPO dynamic sampling and VADE-style prompt selection.

Pure components (CPU-testable, no engine imports); :class:`grae.engines.trl.GraeTrainer` wires them
into TRL's generation step, ``grae train`` exposes them as the ``sampling:`` section, and the verl
plugin uses verl's own ``algorithm.filter_groups`` (docs/sampling.md).

* :func:`informative_groups` — DAPO's dynamic-sampling filter (Yu et al. 2025, arXiv:2503.14476, §3.2:
  keep a group only if 0 < |{correct}| < G), generalised to "zero reward variance".
* :class:`PromptPosterior` — a per-prompt Beta posterior on success with decay toward the prior and
  Thompson selection by Bernoulli variance p(1 − p) (the idea of VADE, Hu et al. 2025, arXiv:2511.18902).
* :class:`PromptStream` — the seeded uniform stream the extra generation rounds draw prompts from.
"""

from grae.sampling.config import DROP_CHOICES, SELECTIONS, SamplingConfig
from grae.sampling.dynamic import GROUP_KINDS, group_kinds, informative_groups
from grae.sampling.stream import PromptStream
from grae.sampling.vade import PromptPosterior

__all__ = [
    "DROP_CHOICES",
    "GROUP_KINDS",
    "SELECTIONS",
    "PromptPosterior",
    "PromptStream",
    "SamplingConfig",
    "group_kinds",
    "informative_groups",
]

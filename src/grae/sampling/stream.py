"""A seeded uniform stream of prompt indices: where dynamic sampling's extra rounds draw from."""

from __future__ import annotations

import numpy as np


class PromptStream:
    """Dataset indices in a fresh seeded shuffle per epoch, drawn ``take(k)`` at a time.

    Deterministic from ``(seed, epoch)``: every process of a run draws the same indices, and a run
    resumed from :meth:`state_dict` continues where it stopped.
    """

    def __init__(self, num_prompts: int, seed: int):
        if num_prompts < 1:
            raise ValueError("PromptStream: the dataset is empty")
        self.num_prompts, self.seed = num_prompts, seed
        self.epoch, self.position = 0, 0

    def _order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.num_prompts)

    def take(self, k: int) -> list[int]:
        taken: list[int] = []
        while len(taken) < k:
            order = self._order()
            chunk = order[self.position:self.position + k - len(taken)]
            taken.extend(int(i) for i in chunk)
            self.position += len(chunk)
            if self.position >= self.num_prompts:
                self.epoch, self.position = self.epoch + 1, 0
        return taken

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

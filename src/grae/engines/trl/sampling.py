"""GraeTrainer's sampling rounds: DAPO dynamic sampling and VADE-style prompt selection
(:mod:`grae.sampling`, docs/sampling.md).

One training generation step runs in rounds — choose prompts, TRL generates and scores them, every
process's rows are gathered, informative groups kept — and the estimator sees the assembled batch of
kept groups. Every decision reads gathered data, so every process takes the same one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from grae.engines.rows import LEFT_PADDED, concat_rows, pad_value, per_row_tensors, take_rows, trim_padding
from grae.sampling import GROUP_KINDS, PromptPosterior, PromptStream, SamplingConfig, group_kinds, informative_groups

logger = logging.getLogger("grae.engines.trl")


def _sampling_config(sampling: SamplingConfig | dict[str, Any] | None) -> SamplingConfig:
    if sampling is None:
        return SamplingConfig()
    if isinstance(sampling, dict):
        unknown = set(sampling) - set(SamplingConfig.__dataclass_fields__)
        if unknown:
            valid = ", ".join(SamplingConfig.__dataclass_fields__)
            raise ValueError(f"sampling: unknown fields {sorted(unknown)}; valid: {valid}")
        sampling = SamplingConfig(**sampling)
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"sampling: expected a grae.sampling.SamplingConfig or a dict, got {type(sampling).__name__}")
    sampling.check()
    return sampling


class SamplingRounds:
    """GraeTrainer's dynamic-sampling pieces (a mixin of :class:`~grae.engines.trl.GraeTrainer`; every
    attribute it reads is the trainer's)."""

    def _check_sampling(self) -> tuple[PromptPosterior | None, PromptStream | None]:
        """Refuse what dynamic sampling / selection cannot do; build their state."""
        cfg = self.sampling
        if not cfg.active:
            return None, None
        if self.multi_objective_aggregation == "normalize_then_sum":
            raise ValueError("multi_objective_aggregation='normalize_then_sum': dynamic sampling and prompt selection "
                             "read raw rewards (success_threshold); use 'sum_then_normalize' with sampling")
        if getattr(self.estimator, "requires", None):
            raise ValueError(f"sampling: dynamic sampling and prompt selection do not supply estimator context yet; "
                             f"estimator {self.estimator.name!r} requires {', '.join(sorted(self.estimator.requires))}")
        conflict = cfg.conflict_with(self.estimator)
        if conflict:
            raise ValueError(conflict)
        dataset = self.train_dataset
        if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError("sampling: dynamic sampling and prompt selection draw prompts by index; "
                             "train_dataset must be a map-style dataset (not an IterableDataset)")
        columns = set(getattr(dataset, "column_names", None) or [])
        if columns & {"image", "images"}:
            raise ValueError("sampling: dynamic sampling and prompt selection do not support image datasets yet")
        if cfg.dynamic and self.num_generations < 2:
            raise ValueError("sampling.dynamic: needs num_generations >= 2 (a group of one has no reward variance)")
        num_groups = self.args.generation_batch_size // self.num_generations
        if num_groups > len(dataset):
            raise ValueError(f"sampling: a generation batch takes {num_groups} prompts, the dataset has {len(dataset)}")
        posterior = PromptPosterior(len(dataset), cfg.prior_alpha, cfg.prior_beta, cfg.decay) \
            if cfg.selection == "vade" else None
        stream = PromptStream(len(dataset), seed=self.args.seed + 1) if cfg.dynamic and posterior is None else None
        return posterior, stream

    @property
    def _pad_id(self) -> int:
        pad = getattr(self._tokenizer, "pad_token_id", None)
        return 0 if pad is None else int(pad)

    def _sample_training_batch(self, inputs: list[dict], generate: Callable[[list[dict]], dict]) -> dict:
        """One generation batch under ``self.sampling`` (see :mod:`grae.sampling`); ``generate`` is TRL's
        ``_generate_and_score_completions``.

        Round by round: choose prompts (VADE, or after the first round a seeded uniform stream),
        let TRL generate and score them, gather the rows of every process, keep the informative
        groups. The first round is the whole batch (B prompts); a later round asks for the shortfall
        divided by the fraction kept so far (at most B), so a step that lacks two groups generates a
        few, not B more. Stops when B groups are kept or after ``max_gen_batches`` rounds; then the
        batch is topped up with dropped groups of weight 0 (they train nothing). Every decision reads
        gathered data, so every process takes the same one.
        """
        cfg, group_size = self.sampling, self.num_generations
        n_local, world = len(inputs), self.accelerator.num_processes
        num_groups = n_local * world // group_size
        step = self.state.global_step
        rounds, round_rewards, kept, spare, records = [], [], [], [], []
        selected_p, used = [], set()
        for round_index in range(cfg.max_gen_batches if cfg.dynamic else 1):
            ask = num_groups if round_index == 0 else self._round_size(num_groups - len(kept), len(kept), len(records))
            prompts = None
            if self._posterior is not None:
                rng = np.random.default_rng([self.args.seed, step, round_index])
                prompts = self._posterior.select(ask, step, rng, exclude=used)
                selected_p.extend(self._posterior.mean(prompts, step).tolist())
            elif round_index > 0:
                prompts = self._prompt_stream.take(ask)
            round_local = ask * group_size // world
            if prompts is not None:
                used.update(prompts)
                inputs = self._local_inputs(prompts, round_local)
            out = generate(inputs)
            rewards = self._gathered_rewards(group_size)  # [ask × G], every process's rows
            self.grae_generated_completions += rewards.numel()
            rows = self._gather_rows(out, round_local)
            if self._posterior is not None:
                grouped = rewards.view(ask, group_size)
                scored = ~torch.isnan(grouped)
                successes = ((grouped >= cfg.success_threshold) & scored).sum(dim=1)
                self._posterior.update(prompts, successes.numpy(), scored.sum(dim=1).numpy(), step)
            keep = informative_groups(rewards, group_size, cfg.drop, cfg.success_threshold) if cfg.dynamic \
                else torch.ones(ask, dtype=torch.bool)
            kinds = group_kinds(rewards, group_size, cfg.success_threshold)
            grouped_rewards = rewards.view(ask, group_size).tolist()  # [ask, G]
            for group in range(ask):
                (kept if keep[group] else spare).append((round_index, group))
                records.append({"round": round_index, "group": group, "prompt_index": None if prompts is None else prompts[group],
                                "kind": GROUP_KINDS[int(kinds[group])],
                                "rewards": [None if r != r else r for r in grouped_rewards[group]]})
            rounds.append(rows)
            round_rewards.append(rewards)
            if len(kept) >= num_groups:
                break
        trained, filler = kept[:num_groups], spare[:max(0, num_groups - len(kept))]
        if filler and self.accelerator.is_main_process:
            logger.warning("step %d: %d of %d groups informative after %d generation rounds (sampling.max_gen_batches); "
                           "training on those, the other %d have weight 0", step + 1, len(trained), num_groups,
                           len(rounds), len(filler))
        return self._assemble(rounds, round_rewards, trained, filler, records, n_local, selected_p)

    def _round_size(self, shortfall: int, kept: int, generated: int) -> int:
        """Prompts for the next round: ``shortfall`` over the fraction kept so far (all if none was kept),
        at most a full batch, rounded up so that every process gets whole rows (TRL's layout)."""
        full = self.args.generation_batch_size // self.num_generations
        ask = full if kept == 0 else min(full, math.ceil(shortfall * generated / kept))
        unit = self.accelerator.num_processes // math.gcd(self.num_generations, self.accelerator.num_processes)
        return min(full, math.ceil(ask / unit) * unit)

    def _assemble(self, rounds, round_rewards, trained, filler, records, n_local, selected_p) -> dict:
        group_size = self.num_generations
        offsets = [0]
        for rewards in round_rewards[:-1]:
            offsets.append(offsets[-1] + rewards.numel())

        def row_index(groups):  # rows of (round, group) pairs in the concatenation of all rounds
            return torch.tensor([offsets[r] + g * group_size + i for r, g in groups for i in range(group_size)],
                                dtype=torch.long)

        every_row = concat_rows(rounds, self._pad_id)
        all_rewards = torch.cat(round_rewards)  # [rounds × N_global]
        kept_rows, filler_rows = row_index(trained), row_index(filler)
        kept_rewards = all_rewards[kept_rows]
        result = self.estimator(kept_rewards, torch.arange(kept_rewards.numel()) // group_size)
        n_filler = filler_rows.numel()
        result = type(result)(torch.cat([result.advantages, torch.zeros(n_filler, dtype=result.advantages.dtype)]),
                              torch.cat([result.weights, torch.zeros(n_filler, dtype=result.weights.dtype)]),
                              dict(result.metrics))
        batch_rows = torch.cat([kept_rows, filler_rows])  # [N_global]
        batch = trim_padding(take_rows(every_row, batch_rows))
        start = self.accelerator.process_index * n_local
        device = self.accelerator.device
        out = {key: value[start:start + n_local].to(device) for key, value in batch.items()}

        logged = torch.zeros(all_rewards.numel())  # what trained, per generated row (0 where nothing did)
        logged[kept_rows] = result.advantages[:kept_rows.numel()].float()
        self._replace_logged_advantages(logged)
        trained_set = set(trained)
        for record in records:
            record["trained"] = (record["round"], record["group"]) in trained_set
        self.last_groups = records
        metrics = self._metrics["train"]
        metrics["grae/kept_group_frac"].append(len(trained) / len(records))
        metrics["grae/gen_batches"].append(float(len(rounds)))
        metrics["grae/filler_groups"].append(float(len(filler)))
        if selected_p:
            metrics["grae/selected_p"].append(float(np.mean(selected_p)))
        return self._with_advantages(out, torch.cat([kept_rewards, torch.full((n_filler,), torch.nan)]), result, "train")

    def _local_inputs(self, prompts: list[int], n_local: int) -> list[dict]:
        """This process's rows when the global batch is ``prompts``, each repeated G times (TRL's layout)."""
        global_rows = [index for index in prompts for _ in range(self.num_generations)]
        start = self.accelerator.process_index * n_local
        return [self.train_dataset[index] for index in global_rows[start:start + n_local]]

    def _gather_rows(self, out: dict, n_local: int) -> dict[str, torch.Tensor]:
        """Every process's rows of ``out``, in global order (the same on every process)."""
        rows = per_row_tensors(out, n_local, skip=("advantages", "num_items_in_batch"))
        gathered = {}
        for key in sorted(rows):  # same order on every process: each key is one collective
            value = rows[key]
            if value.dim() >= 2:
                value = self.accelerator.pad_across_processes(value, dim=1, pad_index=pad_value(key, self._pad_id),
                                                              pad_first=key in LEFT_PADDED)
            gathered[key] = self.accelerator.gather(value).cpu()
        return gathered

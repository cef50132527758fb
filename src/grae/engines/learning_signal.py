"""Steps without learning signal, said while they happen.

A GRPO-family step learns only from advantages. When no group of its batch has non-zero advantage mass
(``grae/adv_pos_mass`` + ``grae/adv_neg_mass`` = 0, :func:`grae.metrics.batch_diagnostics`) — with GRPO, when
every group's rewards are equal, each A_i = (r_i − mean)/(std + ε) = 0 — the policy-gradient term is 0 (and
so are the loss and grad_norm without a KL term): the step trained nothing. Runs that log no advantage masses (stock TRL keys
only) fall back to TRL's ``frac_reward_zero_std == 1`` (every group's rewards equal).

:class:`NoSignalWatch` says so on the console at the first step of a streak (``step N: no learning signal …``),
the progress line marks every such step (:func:`progress_mark`): one line a step. After ``no_signal_steps`` such
steps in a row (3 by default; ``grae train --no_signal_steps N``, 0 turns the watch off) ``grae train`` stops with
the diagnosis, the likely causes (reward format, token budget, task difficulty: :func:`likely_causes`), and a
resumable checkpoint (``stop=True``); with ``--continue-without-signal`` it warns once and trains on.
:class:`GraeTrainer` adds the same watch to a TRL script (``no_signal_steps=``; its lines go to the
``grae.engines.trl.trainer`` logger, the warning at WARNING; it warns, it does not stop), reading TRL's own log keys
where grae's advantage masses are absent.

Before step 1 :func:`base_diagnosis` reads the base model's held-out completions: a base that scores 0 with most
completions cut or unreadable, or whose measured success rates leave fewer than :data:`MIN_INFORMATIVE_GROUPS` of
the groups of G samples expected to disagree (:func:`expected_informative_share`), cannot learn here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from transformers import TrainerCallback

#: advantage mass (mean |A| over samples, positive + negative parts) below which a step has no signal;
#: one informative group of 8 among 64 carries ~5e-3
NO_SIGNAL_MASS = 1e-6

#: logged steps without signal in a row after which one warning names the likely causes
NO_SIGNAL_STEPS = 3

#: share of completions cut at max_completion_length from which the token budget is named first
CLIPPED_FIRST = 0.5


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def step_without_signal(logs: dict) -> bool | None:
    """Whether a logged step's batch had no group with non-zero advantage mass (None: nothing logged to tell)."""
    pos, neg = _number(logs.get("grae/adv_pos_mass")), _number(logs.get("grae/adv_neg_mass"))
    if pos is not None and neg is not None:
        return abs(pos) + abs(neg) < NO_SIGNAL_MASS
    frac = _number(logs.get("frac_reward_zero_std"))
    return None if frac is None else frac >= 1.0


def progress_mark(logs: dict) -> str:
    """Appended to the progress line of a logged step: `` no-signal`` on a step without signal, else ''."""
    return " no-signal" if step_without_signal(logs) else ""


@dataclass(frozen=True)
class Knobs:
    """Where the user changes what a cause names: ``grae train``'s keys, or a Python user's arguments."""

    #: the training's token budget
    budget: str
    #: how answers are read
    extraction: str
    #: completions per prompt, sampling temperature
    generations: str
    temperature: str


#: ``grae train``'s keys
TRAIN_KNOBS = Knobs("trl.max_completion_length",
                    "task.params.answer_extraction for a dataset task, plain_answer for a reasoning-gym one",
                    "trl.num_generations", "trl.temperature")
#: ``grae train``'s keys before step 1: the held-out evaluation's budget goes with the training's
BASE_KNOBS = dataclasses.replace(TRAIN_KNOBS, budget="trl.max_completion_length and eval.max_tokens")
#: a Python user's: GRPOConfig's arguments and the reward function (GraeTrainer's warning)
PYTHON_KNOBS = Knobs("GRPOConfig(max_completion_length=...)",
                     "the reward function, or the prompt's instruction; a grae task reads answers as "
                     "get_task(name, answer_extraction=...) sets",
                     "GRPOConfig(num_generations=...)", "GRPOConfig(temperature=...)")


def likely_causes(rewards: Sequence[float], clipped: Sequence[float] = (), max_completion_length: int | None = None,
                  *, unreadable: float | None = None, knobs: Knobs = TRAIN_KNOBS,
                  budget_name: str = "max_completion_length") -> str:
    """The likely causes of steps whose groups all scored alike, most likely first: reward format (every
    completion scored 0; ``unreadable``: the share that held no answer the verifier reads, where known), token
    budget (completions cut at ``max_completion_length``: ``clipped`` is TRL's ``completions/clipped_ratio`` per
    step; named only when some were cut, or when the share was not logged) and task difficulty, from the steps'
    mean ``rewards``. Each fix is named as ``knobs`` spells it; ``budget_name`` is the budget the completions were
    cut at."""
    causes = []
    if rewards and max(rewards) == 0.0:
        held = ("" if unreadable is None else " (each held an answer the verifier reads: a wrong one)" if unreadable == 0
                else f" ({unreadable:.0%} held no answer the verifier reads)")
        causes.append(f"reward format: every completion scored 0{held}, so the model likely never writes the answer the "
                      "way the verifier reads it (e.g. <answer> tags or \\boxed{} it does not produce), or the verifier "
                      "rejects right answers; score a few completions by hand, change the prompt or how answers are read "
                      f"({knobs.extraction})")
        difficulty = "task difficulty: too hard for the model; an easier task or a stronger base model"
    elif rewards and min(rewards) == max(rewards):
        causes.append(f"task difficulty: every completion scored {rewards[0]:g}: the task is too easy (or too hard) "
                      "for the model, or the verifier returns a constant")
        difficulty = None
    else:
        causes.append(f"within each group the completions scored alike: raise {knobs.generations} or "
                      f"{knobs.temperature}")
        difficulty = "task difficulty: groups all right or all wrong; a task nearer the model's level keeps them mixed"
    if clipped:
        share = sum(clipped) / len(clipped)
        if share > 0:
            budget = (f"token budget: {share:.0%} of completions hit {budget_name}"
                      f"{f' ({max_completion_length})' if max_completion_length else ''} before they ended; raise "
                      f"{knobs.budget}")
            causes.insert(0 if share >= CLIPPED_FIRST else len(causes), budget)
    else:
        causes.append(f"token budget (how many completions were cut is not logged): completions cut at the token budget "
                      f"lose their answer; raise {knobs.budget}")
    if difficulty:
        causes.append(difficulty)
    return "; ".join(causes)


#: share of the base model's held-out completions cut or unreadable from which, with none right, training stops
#: before step 1 (:func:`base_diagnosis`)
DEAD_BASE_SHARE = 0.9

#: expected share of groups whose G samples disagree (some right, some wrong) below which training stops before
#: step 1: under 1 group in 50 would carry any learning signal (:func:`expected_informative_share`)
MIN_INFORMATIVE_GROUPS = 0.02


def expected_informative_share(rates: Sequence[float], group_size: int) -> float:
    """The share of groups of ``group_size`` samples expected to have both a right and a wrong completion (the
    only groups with non-zero advantage), averaged over problems with success rates ``rates``:
    mean of 1 − p^G − (1 − p)^G (0 for no problem)."""
    if not rates:
        return 0.0
    return sum(1.0 - p ** group_size - (1.0 - p) ** group_size for p in rates) / len(rates)


def base_diagnosis(labels: Sequence[bool], cut: Sequence[bool], readable: Sequence[bool], budget: int,
                   budget_key: str = "eval.max_tokens", *, problems: Sequence[str] | None = None,
                   group_size: int | None = None) -> str | None:
    """The diagnosis of a base model that cannot learn here, from its held-out completions before training, or
    None when it can. Two cases:

    - none right (``labels``) and at least :data:`DEAD_BASE_SHARE` of them cut at the token budget (``cut``) or
      holding no answer the verifier reads (not ``readable``);
    - given each completion's problem (``problems``) and the training's ``group_size`` G: the problems' measured
      success rates leave fewer than :data:`MIN_INFORMATIVE_GROUPS` of the groups expected to disagree
      (:func:`expected_informative_share`): 1 right completion in 512 on 64 problems gives about 1 %.

    The causes are :func:`likely_causes`', the words of the warning after steps without signal."""
    total = len(labels)
    if not total:
        return None
    share_cut, share_unread = sum(cut) / total, 1 - sum(readable) / total
    dead = sum(c or not r for c, r in zip(cut, readable))
    if not any(labels) and dead >= DEAD_BASE_SHARE * total:
        causes = likely_causes([0.0], [share_cut], budget, unreadable=share_unread, budget_name=budget_key,
                               knobs=BASE_KNOBS)
        return (f"the base model scored 0 on all {total} held-out completions before training; {share_cut:.0%} were "
                f"cut at the token budget ({budget_key} {budget}) before they ended and {share_unread:.0%} held no "
                "answer the verifier reads, so every group would score alike and training would have no learning "
                f"signal. Likely causes: {causes}")
    if problems is None or not group_size:
        return None
    by_problem: dict[str, list[bool]] = {}
    for problem, label in zip(problems, labels):
        by_problem.setdefault(str(problem), []).append(bool(label))
    rates = [sum(marks) / len(marks) for marks in by_problem.values()]
    share = expected_informative_share(rates, group_size)
    if share >= MIN_INFORMATIVE_GROUPS:
        return None
    causes = likely_causes(rates, [share_cut], budget, unreadable=share_unread, budget_name=budget_key,
                           knobs=BASE_KNOBS)
    return (f"the base model got {sum(map(bool, labels))} of {total} held-out completions right before training "
            f"({len(rates)} problems); at each problem's measured success rate p a group of {group_size} samples "
            f"has both a right and a wrong completion with probability 1 − p^{group_size} − (1 − p)^{group_size}, "
            f"{share:.1%} on average (below {MIN_INFORMATIVE_GROUPS:.0%}), so almost every step would have no "
            f"learning signal. Likely causes: {causes}; grae data band keeps the problems a base model can learn from")


def exact_base_diagnosis(rates: Sequence[float], group_size: int) -> str | None:
    """:func:`base_diagnosis` from a base's exact held-out p per problem (``rates``, no sampling): None unless fewer
    than :data:`MIN_INFORMATIVE_GROUPS` of the groups of ``group_size`` are expected to disagree."""
    share = expected_informative_share(rates, group_size)
    if not rates or share >= MIN_INFORMATIVE_GROUPS:
        return None
    mean = sum(rates) / len(rates)
    return (f"the base model's exact pass@1 before training is {mean:.2%} on {len(rates)} held-out problems; at each "
            f"problem's p a group of {group_size} samples has both a right and a wrong completion with probability "
            f"1 − p^{group_size} − (1 − p)^{group_size}, {share:.1%} on average (below {MIN_INFORMATIVE_GROUPS:.0%}), "
            "so almost every step would have no learning signal; grae data band keeps the problems a base model can "
            "learn from")


class NoSignalWatch(TrainerCallback):
    """Says the first logged step of a streak without learning signal on the console at once (the progress line
    marks the others), and after ``streak_steps`` such steps in a row one warning with :func:`likely_causes`
    (again only after a step with signal). With ``stop``, the streak's diagnosis is kept in :attr:`stopped`
    instead of warned, and training stops after that step with a checkpoint of it (every process of a run sees
    the same gathered logs, so every process stops at the same step)."""

    def __init__(self, log, streak_steps: int = NO_SIGNAL_STEPS, warn=None, knobs: Knobs = TRAIN_KNOBS,
                 stop: bool = False):
        self.log, self.streak_steps, self.knobs, self.stop = log, streak_steps, knobs, stop
        #: says the streak's warning (default: ``log`` with a ``warning:`` prefix)
        self.warn = warn or (lambda message: log(f"warning: {message}"))
        self.streak: list[tuple[int, dict]] = []
        #: with ``stop``: the diagnosis of the streak that stopped training, else None
        self.stopped: str | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs:
            return
        line, warning = self.observe(state.global_step, logs, getattr(args, "max_completion_length", None))
        if warning and self.stop:
            self.stopped = warning
            control.should_save = True
            control.should_training_stop = True
            return
        if not state.is_world_process_zero:
            return
        if line:
            self.log(line)
        if warning:
            self.warn(warning)

    def observe(self, step: int, logs: dict, max_completion_length: int | None) -> tuple[str | None, str | None]:
        """Take one logged step: ``(its line, the streak's warning)``, each None when there is nothing to say (the
        line: at the first step of a streak; :func:`first_streak_note` replays a run's metrics through it)."""
        verdict = step_without_signal(logs)
        if verdict is None:
            return None, None
        if not verdict:
            self.streak = []
            return None, None
        self.streak.append((step, dict(logs)))
        reward = _number(logs.get("reward"))
        line = (f"step {step}: no learning signal: no group had a non-zero advantage (rewards equal within every "
                f"group{f', mean reward {reward:.3f}' if reward is not None else ''}); this step trained nothing "
                "(the progress line marks each further one no-signal)") if len(self.streak) == 1 else None
        warning = self.streak_note(max_completion_length) if len(self.streak) == self.streak_steps else None
        return line, warning

    def streak_note(self, max_completion_length: int | None = None) -> str:
        """The warning for the current streak of steps without signal."""
        steps = [step for step, _ in self.streak]
        rewards = [r for _, logs in self.streak if (r := _number(logs.get("reward"))) is not None]
        clipped = [c for _, logs in self.streak if (c := _number(logs.get("completions/clipped_ratio"))) is not None]
        return (f"no learning signal for {len(steps)} steps in a row (steps {steps[0]}-{steps[-1]}): no group had a "
                f"non-zero advantage, so nothing trained. Likely causes: "
                f"{likely_causes(rewards, clipped, max_completion_length, knobs=self.knobs)}")


def first_streak_note(rows: Sequence[dict], streak_steps: int = NO_SIGNAL_STEPS,
                      max_completion_length: int | None = None) -> str | None:
    """The warning ``grae train`` said on the console for the first streak of ``streak_steps`` logged steps without
    signal, word for word, from the run's ``metrics.jsonl`` ``rows`` (each holds the step's raw log keys); None
    when there was none (or ``streak_steps`` is 0: the warning was off)."""
    if not streak_steps:
        return None
    watch = NoSignalWatch(lambda message: None, streak_steps)
    for row in rows:
        if isinstance(row.get("step"), int) and "reward" in row:
            _, warning = watch.observe(row["step"], row, max_completion_length)
            if warning:
                return warning
    return None

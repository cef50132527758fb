"""Steps without learning signal, said while they happen (issue 33 §4).

A GRPO-family step learns only from advantages. When no group of its batch has non-zero advantage mass
(``grae/adv_pos_mass`` + ``grae/adv_neg_mass`` = 0, :func:`grae.metrics.batch_diagnostics`) — with GRPO, when
every group's rewards are equal, each A_i = (r_i − mean)/(std + ε) = 0 — the policy-gradient term is 0 (and
so are the loss and grad_norm without a KL term): the step trained nothing. Runs that log no advantage masses (stock TRL keys
only) fall back to TRL's ``frac_reward_zero_std == 1`` (every group's rewards equal).

:class:`NoSignalWatch` says so on the console at every such step (``step N: no learning signal …``), the
progress line marks the step (:func:`progress_mark`), and after ``no_signal_steps`` such steps in a row
(3 by default; ``grae train --no_signal_steps N``, 0 turns the warning off) one warning names the likely
causes: reward format, token budget, task difficulty (:func:`likely_causes`). :class:`GraeTrainer` adds the
same watch to a TRL script (``no_signal_steps=``; its lines go to the ``grae.engines.trl.trainer`` logger, the
warning at WARNING), reading TRL's own log keys where grae's advantage masses are absent.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def likely_causes(rewards: Sequence[float], clipped: Sequence[float] = (), max_completion_length: int | None = None,
                  ) -> str:
    """The likely causes of steps whose groups all scored alike, most likely first: reward format (every
    completion scored 0), token budget (completions cut at ``max_completion_length``: ``clipped`` is TRL's
    ``completions/clipped_ratio`` per step) and task difficulty, from the steps' mean ``rewards``."""
    causes = []
    if rewards and max(rewards) == 0.0:
        causes.append("reward format: every completion scored 0, so the model likely never writes the answer the way "
                      "the verifier reads it (e.g. <answer> tags or \\boxed{} it does not produce), or the verifier "
                      "rejects right answers; score a few completions by hand, change the prompt or how the task reads answers "
                      "(task.params.answer_extraction for a dataset task, plain_answer for a reasoning-gym one)")
        difficulty = "task difficulty: too hard for the model; an easier task or a stronger base model"
    elif rewards and min(rewards) == max(rewards):
        causes.append(f"task difficulty: every completion scored {rewards[0]:g}: the task is too easy (or too hard) "
                      "for the model, or the verifier returns a constant")
        difficulty = None
    else:
        causes.append("within each group the completions scored alike: raise num_generations or temperature")
        difficulty = "task difficulty: groups all right or all wrong; a task nearer the model's level keeps them mixed"
    if clipped:
        share = sum(clipped) / len(clipped)
        budget = (f"token budget: {share:.0%} of completions hit max_completion_length"
                  f"{f' ({max_completion_length})' if max_completion_length else ''} before they ended; raise it")
        causes.insert(0 if share >= CLIPPED_FIRST else len(causes), budget)
    else:
        causes.append("token budget: completions cut at max_completion_length lose their answer; raise it")
    if difficulty:
        causes.append(difficulty)
    return "; ".join(causes)


class NoSignalWatch(TrainerCallback):
    """Says each logged step without learning signal on the console at once, and after ``streak_steps``
    such steps in a row one warning with :func:`likely_causes` (again only after a step with signal)."""

    def __init__(self, log, streak_steps: int = NO_SIGNAL_STEPS, warn=None):
        self.log, self.streak_steps = log, streak_steps
        #: says the streak's warning (default: ``log`` with a ``warning:`` prefix)
        self.warn = warn or (lambda message: log(f"warning: {message}"))
        self.streak: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or not state.is_world_process_zero:
            return
        verdict = step_without_signal(logs)
        if verdict is None:
            return
        if not verdict:
            self.streak = []
            return
        self.streak.append((state.global_step, dict(logs)))
        reward = _number(logs.get("reward"))
        self.log(f"step {state.global_step}: no learning signal: no group had a non-zero advantage (rewards equal "
                 f"within every group{f', mean reward {reward:.3f}' if reward is not None else ''}); "
                 "this step trained nothing")
        if len(self.streak) == self.streak_steps:
            self.warn(self.streak_note(getattr(args, 'max_completion_length', None)))

    def streak_note(self, max_completion_length: int | None = None) -> str:
        """The warning for the current streak of steps without signal."""
        steps = [step for step, _ in self.streak]
        rewards = [r for _, logs in self.streak if (r := _number(logs.get("reward"))) is not None]
        clipped = [c for _, logs in self.streak if (c := _number(logs.get("completions/clipped_ratio"))) is not None]
        return (f"no learning signal for {len(steps)} steps in a row (steps {steps[0]}-{steps[-1]}): no group had a "
                f"non-zero advantage, so nothing trained. Likely causes: "
                f"{likely_causes(rewards, clipped, max_completion_length)}")

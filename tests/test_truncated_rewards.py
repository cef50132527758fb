"""A completion cut at the token budget is not scored as answered (issue 54 §3): grae's task reward gives it 0.0,
by TRL's own test of a cut completion, unless the task or the reward asks to score it (``score_truncated``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from grae.data import RowListTask  # noqa: E402
from grae.rewards import TaskReward  # noqa: E402
from grae.rewards.adapters import cut_at_budget  # noqa: E402


class AlwaysRight:
    """A task whose every completion is right: what a truncated completion earns is then the test's whole signal."""

    name = "always"

    def score_batch(self, completions, examples):
        return [1.0] * len(completions)


class FakeTrainer:
    """What TRL's GRPOTrainer exposes: ``eos_token_ids``, ``_tokenizer.pad_token_id``, ``_log_completion_extra``."""

    eos_token_ids = [2, 7]
    _tokenizer = SimpleNamespace(pad_token_id=0)

    def _log_completion_extra(self, column, values):
        pass


def test_cut_completions_score_zero_and_ended_ones_are_read():
    ids = [[5, 5, 2], [5, 5, 5], [5, 7], [5, 0], []]
    log_extra = FakeTrainer()._log_completion_extra
    assert cut_at_budget(ids, log_extra) == [False, True, False, False, False]
    reward = TaskReward(AlwaysRight())
    scores = reward(["a", "b", "c", "d", "e"], answer=["1"] * 5, completion_ids=ids, log_extra=log_extra)
    assert scores == [1.0, 0.0, 1.0, 1.0, 1.0]
    assert TaskReward(AlwaysRight(), score_truncated=True)(["b"], answer=["1"], completion_ids=[[5]],
                                                           log_extra=log_extra) == [1.0]
    # a row without a gold stays missing (None), cut or not; called outside TRL nothing is known to be cut
    assert reward(["b"], answer=[None], completion_ids=[[5]], log_extra=log_extra) == [None]
    assert reward(["b"], answer=["1"], completion_ids=[[5]]) == [1.0]


def test_a_cut_last_number_is_not_paid_and_the_task_parameter_asks_for_it():
    rows = [{"question": "q?", "answer": "12"}]
    log_extra = FakeTrainer()._log_completion_extra
    task = RowListTask("own", rows, heldout_size=0, answer_extraction="last_number")
    cut = dict(answer=["12"], completion_ids=[[5, 5, 5]], log_extra=log_extra)
    assert task.reward_fn()(["7 + 5 = 12 and then 3 + 9 = 12"], **cut) == [0.0]
    asked = RowListTask("own", rows, heldout_size=0, answer_extraction="last_number", score_truncated=True)
    assert asked.reward_fn()(["7 + 5 = 12 and then 3 + 9 = 12"], **cut) == [1.0]
    with pytest.raises(ValueError, match="task.params.score_truncated: true or false"):
        RowListTask("own", rows, heldout_size=0, score_truncated="yes")


def test_on_the_tiny_model_every_cut_completion_scores_zero_as_trl_counts_it(tmp_path):
    from grae.tiny import tiny_model_path
    from test_trl_engine import make_trainer

    seen: list[tuple[list[float], list[bool]]] = []
    reward = TaskReward(AlwaysRight())

    def recorded(completions, **kwargs):
        scores = reward(completions, answer=["1"] * len(completions), **kwargs)
        seen.append((scores, cut_at_budget(kwargs["completion_ids"], kwargs["log_extra"])))
        return scores

    recorded.__name__ = "recorded"
    trainer = make_trainer(str(tiny_model_path()), tmp_path, reward=recorded, steps=1, config={"max_completion_length": 3})
    trainer.train()
    scores, cut = seen[0]
    assert cut is not None and any(cut), "the budget of 3 tokens must cut some completions"
    assert scores == [0.0 if c else 1.0 for c in cut]
    clipped = next(log["completions/clipped_ratio"] for log in trainer.state.log_history if "completions/clipped_ratio" in log)
    assert clipped == sum(cut) / len(cut)  # tol: exact; the same count over the same 8 completions

"""A completion cut at the token budget is not scored as answered: grae's task reward gives it 0.0,
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


# --- grae eval: a completion the budget cut is not scored as answered ----------------------------------------------


class CuttingSampler:
    """Every completion is the right answer (``2a + 1``); the odd generation ids are marked cut by the budget."""

    name = "cutting"

    def __init__(self):
        from grae.eval.backends import SamplingSettings

        self.settings = SamplingSettings()

    def render(self, prompt):
        return prompt

    def generate(self, prompts, n, seed=None):
        import re

        from grae.eval.backends import Completion

        numbers = [int(re.search(r"What is (\d+)", p).group(1)) for p in prompts]
        return [[Completion(f" {2 * a + 1}", cut=j % 2 == 1) for j in range(n)] for a in numbers]


@pytest.mark.parametrize("score_truncated", [False, True])
def test_eval_rows_of_cut_completions_score_zero_unless_the_task_asks(tmp_path, score_truncated):
    from grae.eval.records import read_rows
    from grae.eval.runner import run_samples
    from test_eval import AddTask

    task = AddTask()
    task.score_truncated = score_truncated
    out = tmp_path / "add.jsonl"
    result = run_samples(CuttingSampler(), task.heldout(3), task, n=4, batch_size=4, output_path=out, bootstrap=0)
    rows = read_rows(out)
    assert [r.get("truncated", False) for r in rows] == [r["generation_id"] % 2 == 1 for r in rows]
    assert [r["label"] for r in rows] == [score_truncated or r["generation_id"] % 2 == 0 for r in rows]
    assert result.curve[1] == (1.0 if score_truncated else 0.5)  # tol: exact, counts of 12 labels
    again = run_samples(CuttingSampler(), task.heldout(3), task, n=4, batch_size=4, output_path=out, bootstrap=0)
    assert again.num_generated == 0 and again.curve[1] == result.curve[1]  # tol: exact; resumed rows re-check
    task.score_truncated = not score_truncated  # rows labelled under the other rule are refused on resume
    from grae.eval.records import RecordsError

    with pytest.raises(RecordsError, match="label"):
        run_samples(CuttingSampler(), task.heldout(3), task, n=4, batch_size=4, output_path=out, bootstrap=0)


def test_a_vllm_output_stopped_at_max_tokens_is_cut():
    from grae.eval.backends import vllm_completion

    assert vllm_completion(SimpleNamespace(text=" 12", finish_reason="length")).cut is True
    assert vllm_completion(SimpleNamespace(text=" 12", finish_reason="stop")).cut is False
    assert vllm_completion(SimpleNamespace(text=" 12")) == " 12"


def test_the_hf_sampler_marks_completions_the_budget_cut():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.eval.backends import HFSampler, SamplingSettings
    from grae.tiny import tiny_model_path

    path = str(tiny_model_path())
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    prompts = [f"What is {a} + {a + 2}?\nAnswer:" for a in range(4)]
    ended = HFSampler(model, tok, SamplingSettings(temperature=0, max_tokens=32)).generate(prompts, 1)
    cut = HFSampler(model, tok, SamplingSettings(temperature=0, max_tokens=1)).generate(prompts, 1)
    # the tiny model answers and ends well within 32 tokens; one token cannot hold an answer and its EOS
    assert [c[0].cut for c in ended] == [False] * 4 and [c[0].cut for c in cut] == [True] * 4

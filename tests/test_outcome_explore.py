"""outcome_explore (Song, Kempe & Munos, arXiv:2509.06941) against a plain-Python loop of its equations;
historical counts survive state_dict round trips and GraeTrainer checkpoints; GraeTrainer supplies
answer_id / prompt_key (or refuses without an answer parser)."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grae.advantage import get_estimator
from tolerances import assert_close_scaled


def reference(rewards, group_ids, answers, prompts, *, mode, c, baseline, b0, counts, eps=1e-6):
    """A_i = GRPO_i + c·(b_i − b̄_i), one sample at a time; ``counts`` {(prompt, answer): N} is updated."""
    n = len(rewards)
    valid = [not math.isnan(r) for r in rewards]
    members = {g: [j for j in range(n) if group_ids[j] == g and valid[j]] for g in set(group_ids)}
    parsed = [valid[i] and answers[i] >= 0 for i in range(n)]
    bonus = [0.0] * n
    for i in range(n):
        if not parsed[i]:
            continue
        if mode == "batch":
            repeats = sum(1 for j in members[group_ids[i]] if j != i and parsed[j] and answers[j] == answers[i])
            bonus[i] = -repeats / len(members[group_ids[i]])
        else:
            seen = counts.get((prompts[i], answers[i]), 0)
            bonus[i] = 1.0 if seen == 0 else min(1.0, 1 / math.sqrt(seen))
    out = []
    for i in range(n):
        if not valid[i]:
            out.append(0.0)
            continue
        rs = [rewards[j] for j in members[group_ids[i]]]
        mean = sum(rs) / len(rs)
        std = statistics.stdev(rs) if len(rs) > 1 else 0.0
        adv = (rewards[i] - mean) / (std + eps)
        if parsed[i]:
            if baseline == "mean":
                peers = [bonus[j] for j in members[group_ids[i]] if parsed[j]]
                base = sum(peers) / len(peers)
            else:
                base = b0 if baseline == "constant" else 0.0
            adv += c * (bonus[i] - base)
        out.append(adv)
    if mode == "historical":
        for i in range(n):
            if parsed[i]:
                counts[(prompts[i], answers[i])] = counts.get((prompts[i], answers[i]), 0) + 1
    return out


@st.composite
def batches(draw):
    """2–3 steps over groups of 1–5 samples; few answers (repeats), some unparsable (−1) or missing rewards."""
    n_groups = draw(st.integers(1, 3))
    steps = []
    for _ in range(draw(st.integers(2, 3))):
        sizes = [draw(st.integers(1, 5)) for _ in range(n_groups)]
        gids = [g for g, k in enumerate(sizes) for _ in range(k)]
        n = len(gids)
        rewards = draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, math.nan]), min_size=n, max_size=n))
        answers = draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n))
        prompts = [100 + g for g in gids]  # the same questions every step: the counts carry over
        steps.append((rewards, gids, answers, prompts))
    return steps


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["batch", "historical"]), st.sampled_from(["none", "mean", "constant"]),
       st.sampled_from([0.0, 0.3, 1.0]))
def test_outcome_explore_matches_the_reference_loop(steps, mode, baseline, c):
    est = get_estimator("outcome_explore", mode=mode, baseline=baseline, c=c, b0=0.5)
    counts: dict = {}
    for rewards, gids, answers, prompts in steps:
        out = est(torch.tensor(rewards, dtype=torch.float64), torch.tensor(gids),
                  context={"answer_id": torch.tensor(answers), "prompt_key": torch.tensor(prompts)})
        expected = reference(rewards, gids, answers, prompts, mode=mode, c=c, baseline=baseline, b0=0.5, counts=counts)
        assert out.advantages.tolist() == pytest.approx(expected, abs=1e-9)  # tol: float64, rewards in [0, 1]
    if mode == "historical":
        assert est.state_dict()["counts"] == {str(x): {str(a): n for (x2, a), n in sorted(counts.items()) if x2 == x}
                                              for x in sorted({x for x, _ in counts})}


def assert_bonus(out, grpo, bonus):
    """The advantages are GRPO's (float32) plus ``bonus``: rounding scales with GRPO's advantages."""
    assert_close_scaled(out.advantages.double() - grpo, torch.tensor(bonus, dtype=torch.float64), rel=1e-5,
                        scale=float(grpo.abs().max()))


def test_worked_values():
    """Batch: answers (3, 5, 5, −1) in a group of 4 → bonuses (0, −1/4, −1/4, 0). Historical: the second visit
    of an answer seen once gets 1/√1 = 1, one seen 4 times 1/2."""
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    g = torch.zeros(4, dtype=torch.long)
    ctx = {"answer_id": torch.tensor([3, 5, 5, -1]), "prompt_key": torch.tensor([7, 7, 7, 7])}
    grpo = get_estimator("grpo")(r, g).advantages.double()
    out = get_estimator("outcome_explore", c=1.0)(r, g, context=ctx)
    assert_bonus(out, grpo, [0.0, -0.25, -0.25, 0.0])
    est = get_estimator("outcome_explore", mode="historical", c=1.0)
    est.load_state_dict({"counts": {"7": {"3": 1, "5": 4}}, "step": 3})
    out = est(r, g, context=ctx)
    assert_bonus(out, grpo, [1.0, 0.5, 0.5, 0.0])
    assert est.state_dict() == {"counts": {"7": {"3": 2, "5": 6}}, "step": 4}


def test_defaults_are_the_papers_c_and_b0():
    """Default c = 0.2 (the paper's); UCB-Con's b0 = 0.5: the batch bonuses (0, −1/4, −1/4, 0) enter as 0.2 × them."""
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    g = torch.zeros(4, dtype=torch.long)
    ctx = {"answer_id": torch.tensor([3, 5, 5, -1]), "prompt_key": torch.tensor([7, 7, 7, 7])}
    grpo = get_estimator("grpo")(r, g).advantages.double()
    out = get_estimator("outcome_explore")(r, g, context=ctx)
    assert_bonus(out, grpo, [0.0, -0.05, -0.05, 0.0])
    out = get_estimator("outcome_explore", baseline="constant")(r, g, context=ctx)  # 0.2 × (b − 0.5), parsed only
    assert_bonus(out, grpo, [-0.1, -0.15, -0.15, 0.0])


def test_historical_state_round_trip_continues_identically():
    """Two steps, save (through JSON), load into a fresh estimator: the third step is the same as without a break."""
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 2, (12,), generator=gen).double(), torch.arange(12) // 4,
                {"answer_id": torch.randint(-1, 3, (12,), generator=gen), "prompt_key": (torch.arange(12) // 4) * 13 + 5})
               for _ in range(3)]
    params = dict(mode="historical", baseline="constant", b0=0.5, c=0.7)
    a = get_estimator("outcome_explore", **params)
    for r, g, ctx in batches[:2]:
        a(r, g, context=ctx)
    b = get_estimator("outcome_explore", **params)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict() and b.state_dict()["step"] == 2
    r, g, ctx = batches[2]
    assert torch.equal(a(r, g, context=ctx).advantages, b(r, g, context=ctx).advantages)
    fresh = get_estimator("outcome_explore", **params)
    assert not torch.equal(fresh(r, g, context=ctx).advantages, a(r, g, context=ctx).advantages)  # the state matters


def test_bad_input_and_state_are_refused_in_one_line():
    with pytest.raises(ValueError, match="^mode: one of batch, historical"):
        get_estimator("outcome_explore", mode="ucb")
    with pytest.raises(ValueError, match="^baseline: one of none, mean, constant"):
        get_estimator("outcome_explore", baseline="median")
    with pytest.raises(ValueError, match="^c: must be a finite number >= 0"):
        get_estimator("outcome_explore", c=-1.0)
    with pytest.raises(ValueError, match="context.answer_id: estimator 'outcome_explore' requires it"):
        get_estimator("outcome_explore")(torch.ones(2), torch.zeros(2))
    with pytest.raises(ValueError, match="context.answer_id: must be integers"):
        get_estimator("outcome_explore")(torch.ones(2), torch.zeros(2),
                                         context={"answer_id": torch.tensor([0.5, 1.0]), "prompt_key": torch.zeros(2)})
    with pytest.raises(ValueError, match="is stateless"):
        get_estimator("outcome_explore").load_state_dict({"counts": {}, "step": 0})
    with pytest.raises(ValueError, match=r"state_dict: outcome_explore \(historical\) state is missing \['step'\]"):
        get_estimator("outcome_explore", mode="historical").load_state_dict({"counts": {}})


# -- GraeTrainer ---------------------------------------------------------------------------------

trl = pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from grae.engines.trl import STATE_FILE, GraeTrainer, stable_key  # noqa: E402
from test_trl_engine import G, make_trainer, model_dir  # noqa: E402, F401  (fixture)


def first_token(text: str) -> str | None:
    """The completion's first whitespace-separated token: the parsed answer of a plain ``Answer:`` prompt."""
    parts = text.split()
    return parts[0] if parts else None


class KeyRecording(GraeTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.seen.append(dict(prompts=list(prompts), completions=list(completions)))
        return out

    def _estimator_context(self, out):
        ctx = super()._estimator_context(out)
        self.seen[-1].update(ctx=ctx, rewards=self._gathered_rewards(self.num_generations))
        return ctx


def test_grae_trainer_supplies_answer_ids_and_prompt_keys(model_dir, tmp_path):  # noqa: F811
    trainer = make_trainer(model_dir, tmp_path, "outcome_explore", steps=1, trainer_cls=KeyRecording, answer_fn=first_token)
    trainer.train()
    rec = trainer.seen[0]
    assert set(rec["ctx"]) == {"answer_id", "prompt_key"}  # no log-prob pass for an estimator that needs none
    assert rec["ctx"]["prompt_key"].tolist() == [stable_key(p) for p in rec["prompts"]]
    answers = [first_token(c) for c in rec["completions"]]
    assert rec["ctx"]["answer_id"].tolist() == [-1 if a is None else stable_key(a) for a in answers]
    expected = get_estimator("outcome_explore")(rec["rewards"], torch.arange(len(answers)) // G, context=rec["ctx"])
    assert_close_scaled(trainer.last_advantage_result.advantages, expected.advantages.float(), rel=1e-5)


def test_grae_trainer_without_an_answer_parser_refuses_at_construction(model_dir, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="^estimator: 'outcome_explore' requires context answer_id, which GraeTrainer "
                                         r"\(TRL\) without answer_fn"):
        make_trainer(model_dir, tmp_path, "outcome_explore")


def test_grae_trainer_finds_a_grae_tasks_answer_parser(model_dir, tmp_path):  # noqa: F811
    from grae.data import get_task

    task = get_task("chain_sum")
    trainer = make_trainer(model_dir, tmp_path, "outcome_explore", steps=1, reward=task.reward_fn())
    assert trainer.answer_fn == task.parse_answer


def test_historical_counts_survive_checkpoint_and_resume(model_dir, tmp_path):  # noqa: F811
    kw = dict(estimator_params={"mode": "historical"}, answer_fn=first_token,
              config=dict(save_strategy="steps", save_steps=1))
    full = make_trainer(model_dir, tmp_path / "run", "outcome_explore", steps=2, **kw)
    full.train()
    saved = json.load(open(tmp_path / "run" / "checkpoint-1" / STATE_FILE))
    assert saved["estimator"] == "outcome_explore" and saved["state"]["step"] == 1
    assert sum(n for per in saved["state"]["counts"].values() for n in per.values()) > 0
    resumed = make_trainer(model_dir, tmp_path / "run", "outcome_explore", steps=2, **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-1"))
    assert resumed.estimator.state_dict() == full.estimator.state_dict()


def test_grae_train_config_needs_the_task_verifier_for_answer_ids():
    from grae.train.config import ConfigError, load_config

    cfg = load_config("chain-sum", {"estimator": "outcome_explore", "estimator_params": {"mode": "historical"}})
    assert cfg.reward_funcs == ["task"]  # the task's parse_answer supplies answer_id
    with pytest.raises(ConfigError, match=r"^estimator: 'outcome_explore' needs each completion's parsed answer"):
        load_config("chain-sum", {"estimator": "outcome_explore", "reward_funcs": ["grae.rewards:accuracy_reward"]})

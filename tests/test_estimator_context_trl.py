"""GraeTrainer supplies the estimator context it declares (TRL_CONTEXT) and refuses the rest at construction."""

from __future__ import annotations

import pytest
import torch

from grae.advantage import Estimator, get_estimator
from grae.engines.trl import TRL_CONTEXT, GraeTrainer
from test_trl_engine import G, make_trainer, model_dir  # noqa: F401  (fixture)


class ContextRecording(GraeTrainer):
    """Records the context the estimator saw and an independent log-prob recomputation (plain HF forward)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def _estimator_context(self, out):
        ctx = super()._estimator_context(out)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()  # [B, L-1, V]
        tok_lp = torch.log_softmax(logits / self.temperature, -1).gather(-1, ids[:, 1:, None])[..., 0]  # [B, L-1]
        comp = tok_lp[:, -out["completion_ids"].size(1):] * out["completion_mask"]  # [B, T]
        old = out.get("old_per_token_logps")
        self.seen.append(dict(ctx=ctx, ref_sum=comp.sum(1), ref_len=out["completion_mask"].sum(1),
                              rewards=self._gathered_rewards(self.num_generations),
                              trl_old_sum=None if old is None else (old * out["completion_mask"]).sum(1)))
        return ctx


@pytest.mark.parametrize("config", [{}, {"num_iterations": 2}], ids=["own-pass", "trl-old-logps"])
def test_unlikeliness_trains_on_the_rollout_logprobs(model_dir, tmp_path, config):  # noqa: F811
    """No TRL log-probs (aligned steps): one no-grad pass; num_iterations = 2: TRL's old_per_token_logps are used."""
    trainer = make_trainer(model_dir, tmp_path, "unlikeliness", steps=1, trainer_cls=ContextRecording, config=config)
    trainer.train()
    assert len(trainer.seen) == 1
    rec = trainer.seen[0]
    assert (rec["trl_old_sum"] is not None) == bool(config)
    if rec["trl_old_sum"] is not None:
        assert torch.equal(rec["ctx"]["logprob_sum"], rec["trl_old_sum"].float().cpu())
    assert torch.allclose(rec["ctx"]["logprob_sum"], rec["ref_sum"], atol=1e-4)
    assert torch.allclose(rec["ctx"]["logprob_mean"], rec["ref_sum"] / rec["ref_len"].clamp(min=1), atol=1e-4)
    expected = get_estimator("unlikeliness")(rec["rewards"], torch.arange(len(rec["rewards"])) // G,
                                             context={"logprob_mean": rec["ref_sum"] / rec["ref_len"].clamp(min=1)})
    assert torch.allclose(trainer.last_advantage_result.advantages, expected.advantages.float(), atol=1e-4)


class NeedsAnswers(Estimator):
    name = "needs_answers"
    requires = frozenset({"answer_id"})

    def compute(self, rewards, groups, *, answer_id):
        return rewards * 0, None, {}


def test_an_estimator_needing_unsupplied_context_is_refused_at_construction(model_dir, tmp_path):  # noqa: F811
    assert "answer_id" not in TRL_CONTEXT
    with pytest.raises(ValueError, match="estimator: 'needs_answers' requires context answer_id, which GraeTrainer"):
        make_trainer(model_dir, tmp_path, NeedsAnswers())

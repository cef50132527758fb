"""GraeTrainer supplies the estimator context it declares (TRL_CONTEXT) and refuses the rest at construction."""

from __future__ import annotations

import pytest
import torch

from grae.advantage import Estimator, get_estimator
from grae.engines.rollout_logps import RolloutLogprobRecorder, logit_modifiers, vllm_logprob_modifiers
from grae.engines.trl import TRL_CONTEXT, GraeTrainer
from test_trl_engine import G, make_trainer, model_dir  # noqa: F401  (fixture)
from tolerances import assert_close_scaled  # noqa: E402


class ContextRecording(GraeTrainer):
    """Records the context the estimator saw, whether generation recorded the log-probs, and an independent
    log-prob recomputation (plain HF forward, log_softmax(logits / T), no truncation)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def _recorded_logps(self, out):
        logps = super()._recorded_logps(out)
        self.used_recorder = logps is not None
        return logps

    def _estimator_context(self, out):
        self.used_recorder = None
        ctx = super()._estimator_context(out)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()  # [B, L-1, V]
        tok_lp = torch.log_softmax(logits / self.temperature, -1).gather(-1, ids[:, 1:, None])[..., 0]  # [B, L-1]
        comp = tok_lp[:, -out["completion_ids"].size(1):] * out["completion_mask"]  # [B, T]
        old = out.get("old_per_token_logps")
        self.seen.append(dict(ctx=ctx, ref_sum=comp.sum(1), ref_len=out["completion_mask"].sum(1),
                              rewards=self._gathered_rewards(self.num_generations), recorded=self.used_recorder,
                              ids=out["completion_ids"].clone(), mask=out["completion_mask"].clone(),
                              trl_old_sum=None if old is None else (old * out["completion_mask"]).sum(1)))
        return ctx


class ForwardOnly(ContextRecording):
    record_generation_logprobs = False


#: temperature ≠ 1 with top-k/top-p truncation (the log-probs are of the untruncated π_T); 4 tokens: with seed 1
#: the tiny model's answers end before the window's end ("11<eos>", masked after), at it ("111<eos>"), or are
#: clipped ("1100")
SAMPLING = {"temperature": 1.3, "top_k": 6, "top_p": 0.9, "max_completion_length": 4}


@pytest.mark.parametrize("config, trainer_cls, source", [
    (SAMPLING, ContextRecording, "recorded"),
    (SAMPLING, ForwardOnly, "forward"),
    ({**SAMPLING, "repetition_penalty": 1.3}, ContextRecording, "forward"),
    ({"num_iterations": 2}, ContextRecording, "trl-old"),
], ids=["recorded-in-generate", "forward-forced", "forward-repetition-penalty", "trl-old-logps"])
def test_unlikeliness_trains_on_the_rollout_logprobs(model_dir, tmp_path, config, trainer_cls, source):  # noqa: F811
    """Aligned steps: recorded during generate (TRL has none), else one no-grad pass where the recorder does not
    apply (forced off; a logits processor ahead of it); num_iterations = 2: TRL's old_per_token_logps. Every
    source equals log_softmax(logits / T) of an independent forward, summed up to and including the first EOS."""
    trainer = make_trainer(model_dir, tmp_path, "unlikeliness", steps=1, trainer_cls=trainer_cls, config=config, seed=1)
    trainer.train()
    assert len(trainer.seen) == 1
    rec = trainer.seen[0]
    assert (rec["trl_old_sum"] is not None) == (source == "trl-old")
    assert rec["recorded"] == (source == "recorded")
    if rec["trl_old_sum"] is not None:
        assert torch.equal(rec["ctx"]["logprob_sum"], rec["trl_old_sum"].float().cpu())
    if config is SAMPLING:  # both kinds of completion are in the batch: EOS inside the window, and clipped
        hit_eos = ((rec["ids"] == trainer.eos_token_ids[0]) & (rec["mask"] > 0)).any(1)
        assert hit_eos.any() and (~hit_eos).any()
        assert (rec["mask"].sum(1)[hit_eos] < rec["mask"].size(1)).any()  # some end early: tokens after EOS masked
    assert_close_scaled(rec["ctx"]["logprob_sum"], rec["ref_sum"], rel=1e-5)  # sums of T log-probs: scale with them
    assert_close_scaled(rec["ctx"]["logprob_mean"], rec["ref_sum"] / rec["ref_len"].clamp(min=1), rel=1e-5)
    expected = get_estimator("unlikeliness")(rec["rewards"], torch.arange(len(rec["rewards"])) // G,
                                             context={"logprob_mean": rec["ref_sum"] / rec["ref_len"].clamp(min=1)})
    assert_close_scaled(trainer.last_advantage_result.advantages, expected.advantages.float(), rel=1e-4)


@pytest.mark.parametrize("estimator, records", [("grpo", False), ("outcome_explore", False), ("unlikeliness", True)])
def test_only_a_logprob_estimator_adds_a_logits_processor(model_dir, tmp_path, monkeypatch, estimator, records):  # noqa: F811
    """Estimators that need no log-probs generate exactly as TRL calls generate (no processor installed); on
    grae's sampling loop (the default) and on transformers' generate only they record. A generate of the user's
    own is called exactly as TRL calls it, recorder or not (it may not run processors: the log-probs then come
    from the forward pass)."""
    from grae.eval import decode as dec

    kw = {"answer_fn": lambda text: text.strip() or None} if estimator == "outcome_explore" else {}
    recorded, loop = [], dec.decode
    monkeypatch.setattr(dec, "decode", lambda *a, **k: recorded.append(k["record_temperature"]) or loop(*a, **k))
    make_trainer(model_dir, tmp_path / "loop", estimator, steps=1, **kw).train()
    assert recorded == [1.0 if records else None]  # TRL's temperature
    steps, record = [], RolloutLogprobRecorder.__call__
    monkeypatch.setattr(RolloutLogprobRecorder, "__call__", lambda self, *a: steps.append(1) or record(self, *a))
    trainer = make_trainer(model_dir, tmp_path / "generate", estimator, steps=1, rollouts={"grae_decoding": False}, **kw)
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    trainer.train()
    assert "generate" not in vars(model)  # the recorder's hook is gone after generation
    assert (len(steps) > 0) == records  # transformers' generate ran the recorder at every step, for those only
    steps.clear()
    trainer = make_trainer(model_dir, tmp_path / "own", estimator, steps=1, rollouts={"grae_decoding": False}, **kw)
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    calls, generate = [], model.generate

    def spy(*args, **kwargs):
        calls.append(dict(kwargs))
        return generate(*args, **kwargs)

    model.generate = spy
    trainer.train()
    assert model.generate is spy and len(calls) == 1 and steps == []
    assert set(calls[0]) == {"input_ids", "attention_mask", "generation_config"}


def test_the_recorder_gives_log_softmax_of_raw_logits_over_temperature_including_the_last_token(model_dir):  # noqa: F811
    """Directly on generate: the recorded log-prob of every generated token (the last one from the final step's
    scores) is log_softmax(raw logits / T) — before top-k/top-p truncation, which runs after a custom processor."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LogitsProcessorList

    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir)
    enc = tok([f"What is {a} + {a + 1}?\nAnswer:" for a in range(6)], return_tensors="pt", padding=True)
    cfg = GenerationConfig(max_new_tokens=5, do_sample=True, temperature=0.7, top_k=3, top_p=0.8,
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    recorder = RolloutLogprobRecorder(0.7)
    torch.manual_seed(0)
    out = model.generate(**enc, generation_config=cfg, logits_processor=LogitsProcessorList([recorder]),
                         output_logits=True, output_scores=True, return_dict_in_generate=True)
    new = out.sequences[:, enc.input_ids.size(1):]  # [B, T]
    got = recorder.finish(out.sequences)  # [B, T]
    raw = torch.stack(out.logits, 1)  # [B, T, V] the model's logits, before any processor
    want = torch.log_softmax(raw / 0.7, -1).gather(-1, new[..., None])[..., 0]
    truncated = torch.log_softmax(torch.stack(out.scores, 1), -1).gather(-1, new[..., None])[..., 0]  # top-k/p
    assert got.shape == new.shape
    assert_close_scaled(got, want, rel=1e-6)  # log-probs from a log_softmax over V: rounding scales with them
    # tol: asserts a difference: renormalising over the top-k/p set adds −log(kept mass) to a log-prob, ≫ 1e-3
    assert not torch.allclose(got, truncated, atol=1e-3)  # the truncated distribution differs: not that one


def test_logit_modifiers_names_the_processors_that_run_before_a_custom_one():
    from transformers import GenerationConfig

    trl_like = GenerationConfig(do_sample=True, temperature=0.7, top_k=5, top_p=0.9, min_p=0.1, repetition_penalty=1.0)
    assert logit_modifiers(trl_like) == []
    assert logit_modifiers(GenerationConfig(repetition_penalty=1.2, suppress_tokens=[3])) == \
        ["repetition_penalty", "suppress_tokens"]
    assert logit_modifiers(trl_like, GenerationConfig(bad_words_ids=[[5]])) == ["bad_words_ids"]  # model's default


class NeedsAnswers(Estimator):
    name = "needs_answers"
    requires = frozenset({"answer_id"})

    def compute(self, rewards, groups, *, answer_id):
        return rewards * 0, None, {}


def test_an_estimator_needing_unsupplied_context_is_refused_at_construction(model_dir, tmp_path):  # noqa: F811
    assert "answer_id" not in TRL_CONTEXT
    with pytest.raises(ValueError, match="estimator: 'needs_answers' requires context answer_id, which GraeTrainer"):
        make_trainer(model_dir, tmp_path, NeedsAnswers())


@pytest.mark.parametrize("settings, expected", [
    ({}, []),
    ({"top_p": 0.8}, ["top_p"]),
    ({"top_k": 6, "min_p": 0.05}, ["top_k", "min_p"]),
    ({"repetition_penalty": 1.1}, ["repetition_penalty"]),
    ({"generation_kwargs": {"presence_penalty": 0.5}}, ["generation_kwargs"]),
])
def test_vllm_logprob_modifiers_name_what_vllm_applies_before_its_processed_logprobs(tmp_path, settings, expected):
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **settings)
    assert vllm_logprob_modifiers(args) == expected


class _VLLMOutputs:
    """Just what GraeTrainer._logprob_context reads: TRL's args, a gather, and the no-grad forward pass."""

    def __init__(self, args, forward_logps):
        self.args, self.model, self.estimator = args, None, get_estimator("unlikeliness")
        self.accelerator = type("Single", (), {"gather": staticmethod(lambda x: x)})()
        self._forward_logps = forward_logps

    def _recorded_logps(self, out):
        return None  # vLLM generated: nothing recorded

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._forward_logps, None, None


@pytest.mark.parametrize("top_p", [1.0, 0.8])
@pytest.mark.parametrize("trl_old", [True, False])
def test_vllm_logprobs_feed_the_estimator_only_where_they_are_untruncated(tmp_path, top_p, trl_old):
    """vLLM's processed log-probs after top-p are those of the renormalised nucleus; the estimator then reads
    log_softmax(z/T) from TRL's old_per_token_logps or the forward pass, the quantity of the HF path."""
    from trl import GRPOConfig

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, 12, generator=gen) * 2  # [B, T, V]
    tokens = torch.distributions.Categorical(logits=logits).sample()  # [B, T]
    full = torch.log_softmax(logits, -1)  # [B, T, V] T = 1
    probs, order = full.exp().sort(-1, descending=True)
    outside = (probs.cumsum(-1) - probs) >= top_p  # the nucleus keeps the smallest prefix reaching top_p
    nucleus = torch.log_softmax(full.masked_fill(outside.scatter(-1, order, outside), float("-inf")), -1)
    tokens = torch.where(torch.isfinite(nucleus.gather(-1, tokens[..., None])[..., 0]), tokens, order[..., 0])
    untruncated, processed = full.gather(-1, tokens[..., None])[..., 0], nucleus.gather(-1, tokens[..., None])[..., 0]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    out = {"sampling_per_token_logps": processed, "completion_mask": mask, "completion_ids": tokens,
           "prompt_ids": torch.zeros(4, 2, dtype=torch.long), "prompt_mask": torch.ones(4, 2, dtype=torch.long)}
    if trl_old:
        out["old_per_token_logps"] = untruncated
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", top_p=top_p)
    fake = _VLLMOutputs(args, untruncated)
    ctx = GraeTrainer._logprob_context(fake, out)
    want = untruncated if top_p < 1 else processed  # at top_p = 1 vLLM's are log π_T themselves
    assert_close_scaled(ctx["logprob_sum"], (want * mask).sum(1), rel=1e-5)
    if top_p < 1:
        # tol: asserts a difference: the nucleus renormalisation adds −log(kept mass) per token, ≫ the defaults
        assert not torch.allclose((processed * mask).sum(1), (untruncated * mask).sum(1))  # they would have differed

"""GraeTrainer's rollouts on grae's sampling loop (grae.engines.rollouts): the completions stock
``trl.GRPOTrainer`` samples for the same seed, on a grouped-query model (grae's grouped decoding) and on the
ungrouped tiny model, with sharing and leaving on and off; the loop stands aside where it does not apply.

Whole-run parity (every logged metric and the final weights equal to stock TRL's, every loss type) is
``tests/test_trl_parity.py``, whose GraeTrainer runs on this path by default."""

from __future__ import annotations

import functools
from unittest import mock

import pytest
import torch

pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
from trl import GRPOTrainer  # noqa: E402

from grae.engines.rollouts import RolloutOptions, rollout_options  # noqa: E402
from grae.engines.trl import GraeTrainer  # noqa: E402
from grae.eval import decode as dec  # noqa: E402
from test_trl_engine import make_trainer, model_dir  # noqa: E402, F401  (fixture)
from test_trl_parity import assert_same_run, standin  # noqa: E402, F401  (fixture)
from tolerances import assert_close_scaled, threads  # noqa: E402, F401  (fixture)


def _recording(cls):
    """``cls`` keeping every generation's completion ids; for stock TRL, make_trainer's ``estimator`` is dropped."""

    class Recording(cls):
        def __init__(self, *args, **kwargs):
            if cls is GRPOTrainer:
                kwargs.pop("estimator")
            super().__init__(*args, **kwargs)

        def _generate_single_turn(self, *args, **kwargs):
            completion_ids, logprobs = super()._generate_single_turn(*args, **kwargs)
            self.completions = [*getattr(self, "completions", []), completion_ids]
            return completion_ids, logprobs

    return Recording


@pytest.fixture
def decodes(monkeypatch):
    """The calls that went through grae's loop (rows per call)."""
    calls: list[int] = []
    loop = dec.decode

    @functools.wraps(loop)
    def counting(model, input_ids, *args, **kwargs):
        calls.append(input_ids.shape[0])
        return loop(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(dec, "decode", counting)
    return calls


SAMPLING = {"temperature": 0.9, "top_p": 0.9, "max_completion_length": 8}


@pytest.mark.parametrize("which", ["standin", "model_dir"], ids=["grouped-qwen2", "ungrouped-tiny"])
@pytest.mark.parametrize("options", [{}, {"share_prefill": False, "rows_leave": False}], ids=["default", "plain"])
def test_rollouts_are_stock_trls_completions(request, tmp_path, decodes, which, options):
    folder = request.getfixturevalue(which)

    def trained(cls, out, **kwargs):  # each trainer built and trained in turn: the same RNG stream for both
        trainer = make_trainer(folder, out, "grpo", trainer_cls=_recording(cls), config=SAMPLING, **kwargs)
        if which == "standin":  # the random stand-in: a sharp end-token row, so some rows end early
            trainer.model.lm_head.weight.data[trainer.eos_token_ids[0]] *= 40
        trainer.train()
        return trainer

    stock = trained(GRPOTrainer, tmp_path / "s")
    ours = trained(GraeTrainer, tmp_path / "g", rollouts=options)
    assert len(decodes) == len(stock.completions) == 2  # every generation of the 2 steps went through the loop
    assert ours.completions == stock.completions
    lengths = {len(ids) for batch in stock.completions for ids in batch}
    assert len(lengths) > 1  # some rows ended before others: rows left the batch on the default path


@pytest.mark.parametrize("which", ["standin", "model_dir"], ids=["grouped-qwen2", "ungrouped-tiny"])
def test_rollouts_with_a_repetition_penalty_and_min_p_are_stock_trls_completions(request, tmp_path, decodes, which):
    """GRPOConfig's repetition_penalty, min_p and top_k on TRL's left-padded prompts: the same completions as stock
    GRPOTrainer on the installed transformers (5.23 stopped penalising the pad token of a prompt's left padding;
    grae's loop follows the installed version, tests/test_decode.py). The pad token's output row is the space's
    (tied to a padding_idx embedding it is zero, its logit 0, which a penalty leaves at 0), so it is drawn and
    its penalty matters: with 5.10's penalty on 5.23 (no ``prompt_ignore_length``) the grouped-qwen2 case fails."""
    config = {"temperature": 1.3, "top_k": 5, "min_p": 0.05, "repetition_penalty": 1.3, "max_completion_length": 8}
    runs = []
    for cls in (GRPOTrainer, GraeTrainer):  # each built and trained in turn: the same RNG stream for both
        runs.append(make_trainer(request.getfixturevalue(which), tmp_path / cls.__name__, "grpo",
                                 trainer_cls=_recording(cls), config=config))
        tok, head = runs[-1].processing_class, runs[-1].model.lm_head.weight.data
        head[tok.pad_token_id] = head[tok.convert_tokens_to_ids("Ġ")]
        runs[-1].train()
    stock, ours = runs
    assert len(decodes) == len(stock.completions) == 2 and ours.completions == stock.completions


@pytest.mark.parametrize("which", ["standin", "model_dir"], ids=["grouped-qwen2", "ungrouped-tiny"])
def test_bf16_rollouts_with_top_k_and_top_p_train_as_stock_trl(request, tmp_path, monkeypatch, decodes, which):
    """TRL trains in bf16 by default; bf16 logits tie often, and the nucleus keeps the warpers' member of a tie
    (grae.eval.nucleus). On the CPU, ``bf16=True`` with ``use_cpu=True`` is accelerate's bf16 autocast (float32
    weights, bf16 matmuls: bf16 logits, upcast to float32 by ``generate``). With top_k 10, top_p 0.9, T 0.9:
    the same completions as stock GRPOTrainer, and after 3 steps the same logs and weights, bit for bit."""
    from grae.eval import nucleus

    ties: list[int] = []  # rows whose nucleus boundary cut a tie of logits (where topk's order alone differed)
    keep = nucleus.nucleus_keep

    def counting(scores, top_p, *args):
        kept = keep(scores, top_p, *args)
        lowest_kept = scores.masked_fill(~kept, float("inf")).min(-1).values
        ties.append(int((lowest_kept == scores.masked_fill(kept, float("-inf")).max(-1).values).sum()))
        return kept

    monkeypatch.setattr(nucleus, "nucleus_keep", counting)
    config = {"bf16": True, "top_k": 10, "top_p": 0.9, "temperature": 0.9, "max_completion_length": 8,
              "gradient_accumulation_steps": 2, "learning_rate": 1e-2}
    runs = []
    for cls in (GRPOTrainer, GraeTrainer):  # each built and trained in turn: the same RNG stream for both
        runs.append(make_trainer(request.getfixturevalue(which), tmp_path / cls.__name__, "grpo", steps=3,
                                 trainer_cls=_recording(cls), config=config))
        runs[-1].train()
    stock, ours = runs
    assert stock.accelerator.mixed_precision == "bf16"
    assert len(decodes) == len(stock.completions) == 3 and ours.completions == stock.completions
    assert_same_run(stock, ours, rel=0, atol=0)
    assert sum(ties) > 0


def test_switched_off_or_not_applicable_the_trainer_calls_generate(model_dir, tmp_path, decodes):  # noqa: F811
    off = make_trainer(model_dir, tmp_path / "off", "grpo", steps=1, rollouts={"grae_decoding": False})
    off.train()
    assert decodes == []
    ngram = make_trainer(model_dir, tmp_path / "ngram", "grpo", steps=1,
                         config={"generation_kwargs": {"no_repeat_ngram_size": 2}})
    ngram.train()  # a processor the loop does not reproduce: transformers' generate
    assert decodes == []
    trainer = make_trainer(model_dir, tmp_path / "drop", "grpo", steps=1)
    trainer.model.model.grae_test_dropout = torch.nn.Dropout(0.1)  # an active dropout module in training mode
    trainer.train()
    assert decodes == []
    assert "generate" not in vars(trainer.accelerator.unwrap_model(trainer.model_wrapped))  # the shadow is gone


def test_rollout_options_refuse_unknown_keys_and_non_booleans():
    assert rollout_options(None) == RolloutOptions() and rollout_options({"rows_leave": False}).rows_leave is False
    valid = "grae_decoding, group_by_length, rows_leave, share_prefill, shared_prompt_pass, trim_padding"
    with pytest.raises(ValueError, match=f"rollouts: unknown key 'share'; valid: {valid}"):
        rollout_options({"share": True})
    with pytest.raises(ValueError, match="rollouts.rows_leave: expected true or false, got 'no'"):
        rollout_options({"rows_leave": "no"})


@pytest.mark.parametrize("which", ["standin", "model_dir"], ids=["grouped-qwen2", "ungrouped-tiny"])
def test_shared_prompt_forward_gives_trls_logps_entropies_and_gradients(request, tmp_path, monkeypatch, which,
                                                                        threads):  # noqa: F811
    """GraeTrainer's loss pass computes each group's prompt once (grae.engines.trl.prompt_forward): the same
    per-token log-probs, entropies and parameter gradients as TRL's full pass, on left-padded prompts of two
    lengths and right-padded completions; in row chunks too (TRL's batch_size). At 1 and 2 threads, every
    tolerance relative to the tensor's scale (tests/tolerances.py: a fixed 1e-5 failed on an Intel Xeon)."""
    import grae.engines.trl.trainer as trainer_module
    from grae.engines.trl import prompt_forward

    trainer = make_trainer(request.getfixturevalue(which), tmp_path, "grpo", steps=1)
    model = trainer.model
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 100, (n,), generator=gen) for n in (9, 5)]
    width, completion = 9, 6
    ids = torch.zeros(8, width + completion, dtype=torch.long)  # [B, P + T]; 2 prompts x 4 copies
    mask = torch.zeros_like(ids)
    for row in range(8):
        prompt = prompts[row // 4]
        ids[row, width - len(prompt):width], mask[row, width - len(prompt):width] = prompt, 1
        length = 1 + row % completion  # completions end at different lengths: right padding
        ids[row, width:width + length] = torch.randint(3, 100, (length,), generator=gen)
        mask[row, width:width + length] = 1
    shared: list[bool] = []  # per call: whether the shared pass ran (not TRL's)

    def spy(*args, **kwargs):
        out = prompt_forward.shared_prompt_logps(*args, **kwargs)
        shared.append(out is not None)
        return out

    monkeypatch.setattr(trainer_module, "shared_prompt_logps", spy)

    def run(share, batch_size=None):
        trainer.grae_rollouts = RolloutOptions(shared_prompt_pass=share)
        trainer._shared_prompt_pass = share
        model.zero_grad()
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, completion,
                                                                           batch_size=batch_size, compute_entropy=True)
        (logps * mask[:, width:]).sum().backward()
        return logps.detach(), entropies.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    theirs = run(False)
    assert shared == []
    for batch_size in (None, 4):
        ours = run(True, batch_size)
        keep = mask[:, width:].bool()
        assert_close_scaled(ours[0][keep], theirs[0][keep], rel=1e-5)
        assert_close_scaled(ours[1][keep], theirs[1][keep], rel=1e-5)
        for name, grad in theirs[2].items():  # a sum over rows and positions: rounding ~1e-6 of the tensor's scale
            assert_close_scaled(ours[2][name], grad, rel=1e-4, msg=name)
    assert shared == [True] * 3  # one call, then two row chunks of 4 (one prompt each)


@pytest.mark.parametrize("loss", [{}, {"loss_agg_mode": "seq-mean-token-sum-norm"}], ids=["trl-loss", "grae-loss"])
def test_loss_micro_batches_cut_to_their_longest_completion_train_as_the_full_width(standin, tmp_path, monkeypatch,  # noqa: F811
                                                                                    loss, threads):  # noqa: F811
    """``rollouts.trim_padding``: each loss micro-batch drops the completion columns that are padding in all of
    its rows, so TRL's forward and backward (and grae's loss) run over its own longest completion: the same
    logged loss, gradient norm, entropy and final weights as the full-width pass, up to float rounding, with
    the constant-length normaliser (Dr. GRPO's L = max_completion_length) unchanged."""
    owner, name = (GraeTrainer, "_grae_loss") if loss else (GRPOTrainer, "_compute_loss")
    inner = getattr(owner, name)
    received: list[tuple[int, int]] = []  # what the loss itself receives: (width, its longest completion)

    def spy(self, model, inputs):
        mask = inputs["completion_mask"]
        received.append((mask.size(1), int(mask.sum(1).max())))
        return inner(self, model, inputs)

    monkeypatch.setattr(owner, name, spy)

    def trained(trim: bool):
        config = {"max_completion_length": 16, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4}
        trainer = make_trainer(standin, tmp_path / str(trim), "grpo", config=config, rollouts={"trim_padding": trim},
                               **loss)
        trainer.model.lm_head.weight.data[trainer.eos_token_ids[0]] *= 40  # some rows end early
        received.clear()
        trainer.train()
        logs = [{k: v for k, v in entry.items() if k in ("loss", "grad_norm", "entropy")}
                for entry in trainer.state.log_history]
        return logs, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}, list(received)

    full_logs, full_weights, full_widths = trained(False)
    cut_logs, cut_weights, cut_widths = trained(True)
    for full, cut in zip(full_logs, cut_logs, strict=True):
        assert full.keys() == cut.keys()
        for key in full:
            # tol: the loss sums terms of size |advantage| ≤ 2 that cancel to ≈ 0: its rounding scales with the terms
            # (abs 1e-6), the gradient norm and entropy with themselves (rel)
            assert cut[key] == pytest.approx(full[key], rel=1e-5, abs=1e-6), key
    for name, weight in full_weights.items():
        # Adam divides by each gradient's own scale, so float rounding in near-zero gradients moves a weight by up
        # to ~1e-6 here (lr 1e-3, 2 steps: an update moves it by up to 2e-3); the weights' scale is ~0.1-1, so
        # 1e-4 of it: 1e-5 and more
        assert_close_scaled(cut_weights[name], weight, rel=1e-4, msg=name)
    assert len(cut_widths) == len(full_widths) == 8  # 2 steps x 4 micro-batches
    assert [longest for _, longest in cut_widths] == [longest for _, longest in full_widths]
    assert all(width == longest for width, longest in cut_widths)  # each micro-batch at its own longest completion
    assert any(width > longest for width, longest in full_widths)  # where the full pass carried padding columns


def test_group_by_length_moves_every_row_entry_with_its_row():
    """grae.engines.rows.group_by_length: rows re-split by completion length, shortest first, into as many
    micro-batches of the same size; each row's tensors and list items stay together, 0-d tensors and None
    stay, and a multimodal batch is left as TRL split it."""
    from grae.engines.rows import group_by_length

    lengths = [5, 1, 4, 1, 3, 0, 6, 2]  # rows 0-7, two chunks of 4
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])  # [8, 6]
    rows = torch.arange(8)
    chunks = [{"completion_mask": mask[i:i + 4], "row": rows[i:i + 4], "texts": [f"r{j}" for j in range(i, i + 4)],
               "num_items_in_batch": torch.tensor(22), "old_per_token_logps": None} for i in (0, 4)]
    grouped = group_by_length(chunks)
    assert [c["row"].tolist() for c in grouped] == [[5, 1, 3, 7], [4, 2, 0, 6]]  # stable: row 1 before row 3
    for chunk in grouped:
        assert chunk["texts"] == [f"r{j}" for j in chunk["row"].tolist()]
        assert torch.equal(chunk["completion_mask"], mask[chunk["row"]])
        assert chunk["num_items_in_batch"] is chunks[0]["num_items_in_batch"] and chunk["old_per_token_logps"] is None
    images = [{**c, "pixel_values": torch.zeros(4, 3)} for c in chunks]
    assert group_by_length(images) is images and group_by_length(chunks[:1]) == chunks[:1]


@pytest.mark.parametrize("loss", [{}, {"loss_agg_mode": "seq-mean-token-sum-norm"}], ids=["trl-dapo", "grae-loss"])
def test_rows_grouped_by_length_train_as_trls_random_split(standin, tmp_path, monkeypatch, loss, threads):  # noqa: F811
    """``rollouts.group_by_length`` with ``trim_padding``: the generation batch's rows fill the micro-batches by
    completion length, each cut to its own longest row, for a fraction of TRL's columns; the loss (TRL's dapo:
    token sums over the generation batch's count; grae's seq-mean-token-sum-norm) does not depend on the
    split, so the logged loss, gradient norm and final weights match TRL's random split up to float rounding."""
    owner, name = (GraeTrainer, "_grae_loss") if loss else (GRPOTrainer, "_compute_loss")
    inner = getattr(owner, name)
    received: list[tuple[int, int, int]] = []  # (width, longest completion, shortest completion) per micro-batch

    def spy(self, model, inputs):
        lengths = inputs["completion_mask"].sum(1)
        received.append((inputs["completion_mask"].size(1), int(lengths.max()), int(lengths.min())))
        return inner(self, model, inputs)

    monkeypatch.setattr(owner, name, spy)

    def trained(options: dict):
        config = {"max_completion_length": 16, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                  "loss_type": "dapo"}
        trainer = make_trainer(standin, tmp_path / str(len(options)), "grpo", config=config, rollouts=options, **loss)
        trainer.model.lm_head.weight.data[trainer.eos_token_ids[0]] *= 40  # some rows end early
        received.clear()
        trainer.train()
        logs = [{k: v for k, v in entry.items() if k in ("loss", "grad_norm")} for entry in trainer.state.log_history]
        return logs, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}, list(received)

    split_logs, split_weights, split_widths = trained({})
    grouped_logs, grouped_weights, grouped_widths = trained({"trim_padding": True, "group_by_length": True})
    for split, grouped in zip(split_logs, grouped_logs, strict=True):
        assert split.keys() == grouped.keys()
        for key in split:
            assert grouped[key] == pytest.approx(split[key], rel=1e-5, abs=1e-6), key  # tol: the loss's terms, ≤ 2
    for name, weight in split_weights.items():  # Adam amplifies float rounding in near-zero gradients (see above)
        assert_close_scaled(grouped_weights[name], weight, rel=1e-4, msg=name)
    assert len(grouped_widths) == len(split_widths) == 8
    for step in (grouped_widths[:4], grouped_widths[4:]):  # each step's micro-batches in order of length
        assert all(a[1] <= b[2] for a, b in zip(step, step[1:]))
        assert all(width == longest for width, longest, _ in step)
    assert sum(w for w, _, _ in grouped_widths) < sum(w for w, _, _ in split_widths)


def test_group_by_length_stays_off_where_the_loss_depends_on_the_split(standin, tmp_path, caplog):  # noqa: F811
    """bnpo normalises each micro-batch by its own tokens: grouping by length would change the update, so the
    trainer keeps TRL's random split and says why."""
    with caplog.at_level("WARNING", logger="grae.engines.trl.trainer"):
        bnpo = make_trainer(standin, tmp_path / "bnpo", "grpo", config={"loss_type": "bnpo"},
                            rollouts={"group_by_length": True})
    assert not bnpo._group_by_length
    assert "rows keep TRL's random split" in caplog.text and "bnpo" in caplog.text
    dapo = make_trainer(standin, tmp_path / "dapo", "grpo", config={"loss_type": "dapo"}, rollouts={"group_by_length": True})
    assert dapo._group_by_length


def _fake_generate(calls: list[int]):
    """A generate as TRL's test_train_with_mask_truncated_completions patches in: fixed completions, one truncated,
    one ending in the end token, one ending in it at the last place."""

    def fake_generate(input_ids, **kwargs):
        calls.append(input_ids.size(0))
        eos = kwargs["generation_config"].eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        rows = [[5, 6, 7, 8, 9, 10], [11, 12, eos, 0, 0, 0], [13, 14, 15, 16, 17, eos]]
        completions = torch.tensor([rows[i % 3] for i in range(input_ids.size(0))], device=input_ids.device)
        return torch.cat([input_ids, completions], dim=1)

    return fake_generate


@pytest.mark.parametrize("where", ["GenerationMixin", "instance"])
def test_a_generate_that_is_not_transformers_own_is_called_as_stock_trl_calls_it(model_dir, tmp_path, monkeypatch,  # noqa: F811
                                                                                 decodes, caplog, where):
    """Never bypass the user: a patched ``GenerationMixin.generate`` (TRL's own mock-generate test does this) or a
    generate set on the model instance is what the rollouts call, in GraeTrainer as in stock TRL: the same
    completions, the mock called once per generation, grae's loop never; the notice once per run."""
    from transformers.generation.utils import GenerationMixin

    from grae.engines.rollouts import transformers_generate

    completions = {}
    for cls in (GRPOTrainer, GraeTrainer):
        calls: list[int] = []
        trainer = make_trainer(model_dir, tmp_path / cls.__name__, "grpo", steps=2, trainer_cls=_recording(cls),
                               config={"mask_truncated_completions": True})
        model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
        assert transformers_generate(model)
        if where == "GenerationMixin":  # as TRL's test: @patch("transformers.generation.utils.GenerationMixin.generate")
            monkeypatch.setattr(GenerationMixin, "generate", mock.MagicMock(side_effect=_fake_generate(calls)))
        else:
            model.generate = _fake_generate(calls)
        assert not transformers_generate(model)
        with caplog.at_level("WARNING", logger="grae.engines.trl.trainer"):
            trainer.train()
        monkeypatch.undo()
        assert calls == [len(trainer.completions[0])] * 2  # called by each of the 2 generations
        completions[cls] = trainer.completions
    assert completions[GraeTrainer] == completions[GRPOTrainer]
    assert completions[GRPOTrainer][0][:3] == [[5, 6, 7, 8, 9, 10], [11, 12, completions[GRPOTrainer][0][1][2]],
                                                [13, 14, 15, 16, 17, completions[GRPOTrainer][0][2][5]]]
    assert decodes == []
    notices = [r.getMessage() for r in caplog.records if "not transformers' GenerationMixin.generate" in r.getMessage()]
    assert len(notices) == 1 and ("fake_generate" in notices[0] or "MagicMock" in notices[0])


def test_group_by_prompt_keeps_each_prompts_rows_together():
    """``group_by_length(by_prompt=True)``: each prompt's rows fill micro-batches together (prompts in order of
    their longest row, each prompt's rows shortest first); left padding does not split a prompt."""
    from grae.engines.rows import group_by_length

    prompt_ids = torch.tensor([[0, 7, 8], [9, 9, 9], [0, 7, 8], [9, 9, 9], [9, 9, 9], [0, 7, 8], [9, 9, 9], [0, 7, 8]])
    prompt_mask = (prompt_ids != 0).long()
    prompt_ids[2, 0] = 5  # another pad token under the mask: the same prompt
    lengths = [5, 1, 2, 6, 3, 0, 4, 1]  # prompt A (rows 0, 2, 5, 7) longest 5; prompt B (1, 3, 4, 6) longest 6
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    chunks = [{"prompt_ids": prompt_ids[i:i + 4], "prompt_mask": prompt_mask[i:i + 4], "completion_mask": mask[i:i + 4],
               "row": torch.arange(i, i + 4)} for i in (0, 4)]
    grouped = group_by_length(chunks, by_prompt=True)
    assert [c["row"].tolist() for c in grouped] == [[5, 7, 2, 0], [1, 4, 6, 3]]
    quarters = [{key: value[i:i + 2] for key, value in c.items()} for c in chunks for i in (0, 2)]  # 4 micro-batches
    assert [c["row"].tolist() for c in group_by_length(quarters, by_prompt=True)] == [[5, 7], [2, 0], [1, 4], [6, 3]]
    assert [c["row"].tolist() for c in group_by_length(chunks)] == [[5, 1, 7, 2], [4, 6, 0, 3]]  # length alone mixes


def test_the_shared_prompt_pass_computes_each_prompt_once_per_micro_batch(standin, tmp_path, monkeypatch,  # noqa: F811
                                                                          threads):  # noqa: F811
    """With the shared prompt pass each prompt's rows fill micro-batches together (TRL shuffles them before the
    split, so before this a micro-batch rarely held two rows of one prompt): 2 prompts x 4 rows in micro-batches of
    2 compute 1 prompt row per micro-batch (the ideal; TRL's pass computes 2), and the loss (dapo: token sums over
    the generation batch's count) trains as TRL's random split up to float rounding."""
    import grae.engines.trl.trainer as trainer_module
    from grae.engines.trl import prompt_forward
    from grae.eval.prefill import prompt_runs

    computed: list[tuple[int, int]] = []  # per loss or log-prob pass: (rows, prompt rows computed)

    def spy(model, unwrapped, input_ids, attention_mask, logits_to_keep, **kwargs):
        out = prompt_forward.shared_prompt_logps(model, unwrapped, input_ids, attention_mask, logits_to_keep, **kwargs)
        width = input_ids.size(1) - logits_to_keep
        unique = prompt_runs(input_ids[:, :width], attention_mask[:, :width])[0].numel()
        computed.append((input_ids.size(0), unique if out is not None else input_ids.size(0)))
        return out

    monkeypatch.setattr(trainer_module, "shared_prompt_logps", spy)

    def trained(options: dict):
        config = {"max_completion_length": 16, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                  "loss_type": "dapo"}
        trainer = make_trainer(standin, tmp_path / str(len(options)), "grpo", config=config, rollouts=options)
        trainer.model.lm_head.weight.data[trainer.eos_token_ids[0]] *= 40  # some rows end early
        trainer.train()
        logs = [{k: v for k, v in entry.items() if k in ("loss", "grad_norm")} for entry in trainer.state.log_history]
        return logs, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}

    split_logs, split_weights = trained({})
    assert computed == []
    shared_logs, shared_weights = trained({"shared_prompt_pass": True, "trim_padding": True, "group_by_length": True})
    assert computed == [(2, 1)] * 8  # 2 steps x 4 micro-batches, each one prompt computed once
    for split, shared in zip(split_logs, shared_logs, strict=True):
        for key in split:
            assert shared[key] == pytest.approx(split[key], rel=1e-5, abs=1e-6), key  # tol: the loss's terms, ≤ 2
    for name, weight in split_weights.items():
        assert_close_scaled(shared_weights[name], weight, rel=1e-4, msg=name)


def test_with_a_kl_term_the_reference_and_loss_passes_give_bitwise_equal_log_probs(model_dir, tmp_path, caplog):  # noqa: F811
    """beta > 0: the KL term's gradient is exp(ref - logp) - 1 times the log-prob's; where the weights are equal
    (the first step) it must be exactly 0. The shared pass gave the reference pass (groups together) and the loss
    pass (TRL's shuffled micro-batches) log-probs 1e-6 apart, so both stay TRL's pass and the trainer says so."""
    diffs: list[float] = []

    class Checking(GraeTrainer):
        def _compute_loss(self, model, inputs):
            if self.state.global_step == 0:
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
                mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
                with torch.no_grad():
                    logps, _, _ = self._get_per_token_logps_and_entropies(model, ids, mask,
                                                                          inputs["completion_ids"].size(1))
                keep = inputs["completion_mask"].bool()
                diffs.append(float((logps - inputs["ref_per_token_logps"])[keep].abs().max()))
            return super()._compute_loss(model, inputs)

    config = {"beta": 0.1, "max_completion_length": 16, "per_device_train_batch_size": 4,
              "gradient_accumulation_steps": 2, "loss_type": "dapo"}
    with caplog.at_level("WARNING", logger="grae.engines.trl.trainer"):
        trainer = make_trainer(model_dir, tmp_path, "grpo", steps=1, trainer_cls=Checking, config=config,
                               rollouts={"shared_prompt_pass": True, "trim_padding": True, "group_by_length": True})
    assert not trainer._shared_prompt_pass and "rollouts.shared_prompt_pass: off for this run" in caplog.text
    trainer.train()
    assert diffs == [0.0, 0.0]

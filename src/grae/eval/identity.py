"""What an evaluation evaluated, in a form that changes when the weights change.

Rows on disk are resumed only when they were produced by the same identity (and sampling settings,
:data:`grae.eval.runner.RESUME_KEYS`). ``config._name_or_path`` is not an identity: every model
trained from one base carries the base's path.

* a directory of weights: :func:`weights_fingerprint`, a SHA-256 of every weight/config file's name and
  content (streamed; a 7B checkpoint hashes in well under a minute, less than its evaluation);
* a model trained by ``grae train``: ``"<run id>@step<N>"`` (:func:`trained_identity`) — the run id is
  unique per run directory owner (``grae.train.rundir``), the step names the weights within it;
* a model in memory without a directory of weights (a hub model in ``grae train``, a caller of
  :func:`grae.eval.evaluate` that names no identity): :func:`tensors_fingerprint`;
* a hub id that is not on disk, before ``grae eval`` loads it: the id itself (a hub revision pins it;
  say so in the label).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: files whose content defines a model (weights in every format transformers/vLLM read, and the config)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model")
_CHUNK = 1 << 20


def weights_fingerprint(path: str | Path) -> str | None:
    """``"sha256:<hex>"`` over the model files in directory ``path`` (None when it is not a directory)."""
    root = Path(path)
    if not root.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in root.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES):
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def tensors_fingerprint(model) -> str:
    """``"sha256:<hex>"`` over the names, dtypes, shapes and bytes of a loaded model's parameters and
    buffers (an in-memory model with no directory of weights: a hub model, a library caller's model)."""
    import torch

    digest = hashlib.sha256()
    tensors = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    with torch.no_grad():
        for name in sorted(tensors):
            tensor = tensors[name].detach().contiguous().cpu()
            digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "tensors-sha256:" + digest.hexdigest()


def model_identity(name: str, path: str | Path | None = None, model=None) -> str:
    """Identity of the model ``name`` (a preset, directory or hub id) loaded from ``path``: its files'
    hash; else, given the loaded ``model``, its tensors' hash; else the name."""
    found = weights_fingerprint(path if path is not None else name)
    if found is None and model is not None:
        found = tensors_fingerprint(model)
    return found or name


def trained_identity(run_id: str, step: int) -> str:
    return f"{run_id}@step{step}"


def looks_like_missing_path(name: str) -> bool:
    """True for a model name that can only be a local path and does not exist (``./x``, ``/x``, ``~/x``,
    ``a/b/c``, ``runs/x`` where ``runs`` is a local directory); a hub id is ``org/name``."""
    path = Path(name).expanduser()
    if path.exists():
        return False
    local_parent = name.count("/") == 1 and path.parent.is_dir()
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name or local_parent

"""Checking a local model directory's weight files before anything is claimed or loaded.

A ``model.safetensors`` cut short (a copy or download interrupted, a full disk) makes transformers raise
``SafetensorError: … incomplete metadata, file not fully covered`` from deep inside ``from_pretrained``,
after ``grae train`` has claimed its run directory. Opening each file with safetensors reads only its
header and checks that the header's tensors lie within the file: milliseconds, no tensor is read.
"""

from __future__ import annotations

from pathlib import Path


def weights_problem(model: str) -> str | None:
    """Why the safetensors files of local model directory ``model`` cannot be loaded (cut short, corrupt),
    as one line naming the file and the fix; None when they open, or ``model`` is not a local directory."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    from safetensors import safe_open

    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except Exception as err:  # noqa: BLE001 - safetensors raises its own SafetensorError, OSError, ValueError
            why = " ".join(str(err).split()) or type(err).__name__
            return (f"model: {weights} cannot be read ({why}); the file is cut short or corrupt: copy or download "
                    "it again, or use another checkpoint")
    return None

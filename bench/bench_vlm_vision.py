"""Does the tiny VLM look? Greedy accuracy and pass@1 on held-out scenes of each visual task with the
right image, a blank canvas and another prompt's image (:func:`grae.tiny.vlm.vision_gap`), beside the
text-only majority baseline ("chance"). One JSON line per task.

    python bench/bench_vlm_vision.py [--model DIR] [--tasks count_shapes,bar_value] [--problems 200] [--samples 16]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a VLM directory (default: the shipped tiny-vlm)")
    parser.add_argument("--tasks", default="count_shapes,bar_value")
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from grae.presets import tiny_vlm_path
    from grae.tiny.vlm import vision_gap

    path = args.model or str(tiny_vlm_path())
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(path)
    for name in args.tasks.split(","):
        start = time.time()
        gap = vision_gap(model, processor, name, problems=args.problems, samples=args.samples)
        print(json.dumps({"model": path, **gap, "seconds": round(time.time() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()

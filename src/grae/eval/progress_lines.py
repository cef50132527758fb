"""Progress as plain lines, for output that is not a terminal (a log file, a pipe): rich's bars draw nothing
there until they stop, and then leave their last frame in the log."""

from __future__ import annotations


def plain_progress(name: str, total: int, emit, every_s: float = 10.0, clock=None):
    """A progress callback ``(done, total)`` that emits ``"<name>: done/total samples (x/s)"`` lines, at most
    one per ``every_s`` seconds plus the last, for output that is not a terminal. The rate counts the samples
    drawn here: the first report (the rows a resumed run found on disk) is its baseline. Its
    ``decoding(tokens, max_tokens, sequences)`` says at the same pace how far the running call is: rows are
    written per call, and on a CPU a call can take minutes."""
    import time

    clock = clock or time.monotonic
    start = clock()
    state = {"last": None, "done": 0, "base": None}

    def update(done: int, _total: int) -> None:
        now = clock()
        state["done"] = done
        if state["base"] is None:
            state["base"] = done
        if done < total and state["last"] is not None and now - state["last"] < every_s:
            return
        state["last"] = now
        rate = (done - state["base"]) / (now - start) if now > start else 0.0
        emit(f"{name}: {done}/{total} samples ({rate:.2f}/s, {now - start:.0f} s)")

    def decoding(tokens: int, max_tokens: int, sequences: int) -> None:
        now = clock()
        if now - (state["last"] if state["last"] is not None else start) < every_s:
            return
        state["last"] = now
        emit(f"{name}: {state['done']}/{total} samples; decoding a call of {sequences} sequences, "
             f"{tokens}/{max_tokens} tokens ({now - start:.0f} s)")

    update.decoding = decoding
    return update

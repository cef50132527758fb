"""Subprocess worker behind :func:`grae.rewards.verify_math` (run as a script; :func:`check` is also what
:func:`grae.rewards.verify_math` runs in its own process when it is given no timeout).

Comparison: math-verify parses both sides; every decimal in them is replaced by the rational it writes
(``Float('1.41421356')`` → ``141421356/10**8``) before ``math_verify.verify``, so that math-verify's float rounding
(6 decimals) never makes two different numbers equal: the tolerance is exact equality on this path as on the
fast path of :mod:`grae.rewards.verify` (``\\sqrt{2}`` is not 1.41421356; ``\\frac{\\sqrt{8}}{2}`` is ``\\sqrt{2}``).

Protocol (one JSON object per line, ASCII only):

* on start-up, after importing ``math_verify`` and warming up its LaTeX parser, the worker writes
  ``{"ready": true}``;
* the parent writes ``{"id": int, "pred": str, "gold": str, "soft_timeout": float}``;
* the worker answers ``{"id": int, "status": "ok", "result": bool}`` or
  ``{"id": int, "status": "timeout" | "error", "detail": str}``.

Two layers bound the time spent on one request:

1. a *soft* timeout inside the worker: ``signal.setitimer(ITIMER_REAL)`` raises in the worker's own main
   thread (the worker is single-threaded, so ``signal`` works here even though it does not work in the
   caller's thread pool). This interrupts pure-Python sympy loops and keeps the worker alive;
2. the parent's *hard* deadline: if no answer arrives in time (stuck inside a C call such as a huge
   integer power, which signals cannot interrupt), the parent kills the process and starts a new one.

``RLIMIT_AS`` (argument 1, in MiB) turns memory bombs such as ``10^{10^{10}}`` into ``MemoryError``
instead of an out-of-memory kill of the whole machine.

math_verify's own timeouts are disabled (``parsing_timeout=None``, ``timeout_seconds=None``) because
they rely on ``signal.alarm`` and would collide with the soft timeout above.
"""

import os
import sys

# The script's directory (src/grae/rewards) is sys.path[0]; drop it so that no module there can shadow
# a stdlib or third-party module in this process.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import json  # noqa: E402
import signal  # noqa: E402


class _SoftTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so that math_verify's ``except Exception`` cannot swallow it."""


def _on_alarm(signum, frame):
    raise _SoftTimeout()


def _limit_memory(megabytes: int) -> None:
    if megabytes <= 0:
        return
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = megabytes * 1024 * 1024
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):  # not available on this platform: run without the cap
        pass


def _exact_decimals(parsed: list) -> list:
    """math-verify's parse with each sympy ``Float`` replaced by the rational its decimal digits write."""
    from sympy import Basic, Float, Rational

    out = []
    for item in parsed:
        if isinstance(item, Basic):
            floats = item.atoms(Float)
            if floats:
                item = item.xreplace({f: Rational(str(f)) for f in floats})
        out.append(item)
    return out


def check(parse, verify, pred: str, gold: str) -> bool:
    """Whether ``pred`` equals ``gold`` by math-verify with exact decimals (the module docstring)."""
    gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=None)
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(_exact_decimals(gold_parsed), _exact_decimals(pred_parsed), timeout_seconds=None))


def main() -> None:
    memory_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns the lifetime (and Ctrl-C)
    signal.signal(signal.SIGALRM, _on_alarm)
    _limit_memory(memory_mb)

    import logging

    logging.disable(logging.CRITICAL)  # math_verify logs a warning whenever its timeout is disabled
    from math_verify import parse, verify

    check(parse, verify, "\\frac{1}{2}", "0.5")  # load the ANTLR grammar before announcing readiness

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(b'{"ready": true}\n')
    stdout.flush()
    for line in stdin:
        req_id = None
        try:
            try:
                req = json.loads(line)
                req_id = req.get("id")
                signal.setitimer(signal.ITIMER_REAL, max(float(req.get("soft_timeout", 0.0)), 0.0))
                result = check(parse, verify, req["pred"], req["gold"])
                resp = {"id": req_id, "status": "ok", "result": result}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            resp = {"id": req_id, "status": "timeout", "detail": "soft timeout"}
        except MemoryError:
            resp = {"id": req_id, "status": "error", "detail": "MemoryError"}
        except Exception as exc:  # noqa: BLE001 - report, never die on one bad request
            resp = {"id": req_id, "status": "error", "detail": type(exc).__name__}
        try:
            stdout.write(json.dumps(resp).encode("ascii") + b"\n")
            stdout.flush()
        except (BrokenPipeError, OSError):
            return


if __name__ == "__main__":
    main()

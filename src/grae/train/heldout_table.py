"""``grae train``'s held-out table, on the console and in report.md: pass@k of the base and of the trained
model, each with its 95 % interval, and their change with its paired interval.

The intervals come from the held-out rows on disk (``eval/before.jsonl``, ``eval/after.jsonl``) with the
statistics ``grae eval`` and ``grae passk --compare`` print for the same rows: a percentile bootstrap over the
held-out problems, the change paired by problem (:mod:`grae.eval.stats`). A value with no spread to resample
(every problem at 0 % or 100 %, or a change of 0 on every problem) gets the binomial bound at the number of
problems instead of a zero-width interval, and its cell says that n.

Where the run computed the base's format-only oracle (:mod:`grae.train.oracle`: a task with a finite answer
set), the table has its column too, exact pass@k with the same bootstrap over the same problems, and
:meth:`HeldoutTable.oracle_note` is the line under the table that weighs the trained model against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grae.eval.stats import Estimate
from grae.train.oracle import cell  # the table's cell format, shared with the oracle's sentence

#: bootstrap resamples of the held-out problems (as ``grae eval``'s)
BOOTSTRAP = 1000


@dataclass
class HeldoutTable:
    """Per row (``base``, ``trained``, ``change``, and :data:`~grae.train.oracle.ORACLE` where the run has it)
    and k, the estimate with its interval (NaN bounds where the rows were not on disk); ``problems`` and ``n``:
    what the intervals rest on (None: unknown); ``vs_oracle``: trained − oracle paired by problem, per k."""

    ks: list[int]
    rows: dict[str, dict[int, Estimate]]
    problems: int | None = None
    n: int | None = None
    vs_oracle: dict[int, Estimate] | None = None

    def cells(self, k: int) -> list[str]:
        """The row of pass@k: each of :attr:`rows`' cells at ``k``."""
        return [cell(by_k[k], signed=row == "change") for row, by_k in self.rows.items()]

    def caption(self) -> str:
        """What the intervals are, in one line."""
        if self.problems is None:
            return "no held-out rows on disk: point estimates only"
        note = ("; (n=N): no spread to resample, the binomial bound at N problems (one-sided at 0 and 100 %)"
                if any(e.n_eff is not None for r in self.rows.values() for e in r.values()) else "")
        from grae.train.oracle import ORACLE

        oracle = (f"; {ORACLE}: the base with its answers outside the task's format removed (p / mass), exact "
                  "pass@k, no sampling" if ORACLE in self.rows else "")
        return (f"[95 % interval]: bootstrap over the {self.problems} held-out problems, n = {self.n} samples each; "
                f"change: paired by problem{oracle}{note}")

    def oracle_note(self) -> str | None:
        """The line under the table (:func:`grae.train.oracle.oracle_sentence`) at its smallest k; None without
        the oracle or a trained model."""
        from grae.train.oracle import ORACLE, oracle_sentence

        if ORACLE not in self.rows or "trained" not in self.rows:
            return None
        k = self.ks[0]
        return oracle_sentence(self.rows["trained"][k], self.rows[ORACLE][k],
                               self.vs_oracle.get(k) if self.vs_oracle else None, base=self.rows["base"][k], k=k)


def heldout_table(out: Path, before: dict[int, float], after: dict[int, float], n: int | None,
                  seed: int = 0) -> HeldoutTable:
    """The table of the run in ``out``: from its held-out rows when both files are there (``n`` samples a
    problem), else from the pass@k values alone. ``after`` may be empty (a base-only table). ``seed``: the
    bootstrap's, the run's ``eval.seed`` as ``grae eval`` takes its sampling seed, so ``grae eval RUN_DIR``
    prints the same intervals for the same rows."""
    from grae.eval.records import RecordsError, iter_rows
    from grae.eval.stats import count_problems, paired_difference, passk_estimates

    ks = sorted(before)
    rows = {"base": {k: Estimate(before[k]) for k in ks}}
    if after:
        rows["trained"] = {k: Estimate(after[k]) for k in ks}
        rows["change"] = {k: Estimate(after[k] - before[k]) for k in ks}
    paths = {"base": out / "eval" / "before.jsonl", "trained": out / "eval" / "after.jsonl"}
    try:
        counts = {name: count_problems(iter_rows(path), n=n) for name, path in paths.items()
                  if name in rows and path.is_file()}
        if "base" not in counts or (after and "trained" not in counts):
            return HeldoutTable(ks, rows)
        for name, c in counts.items():
            rows[name] = passk_estimates(c, ks, bootstrap=BOOTSTRAP, seed=seed)
        if after:
            rows["change"] = paired_difference(counts["base"], counts["trained"], ks, bootstrap=BOOTSTRAP, seed=seed)[0]
    except (OSError, RecordsError, ValueError):  # rows that cannot be read: the values the run printed
        return HeldoutTable(ks, rows)
    base = counts["base"]
    table = HeldoutTable(ks, rows, base.num_problems, int(base.n.min()))
    _add_oracle(table, out, counts, bool(after), seed)
    return table


def _add_oracle(table: HeldoutTable, out: Path, counts: dict, trained: bool, seed: int) -> None:
    """The format-only oracle's column (and trained − oracle, paired) where the run's exact rows of the base are
    on disk for the base's problems (:func:`grae.train.oracle.oracle_counts`) up to the table's largest k."""
    from grae.eval.records import RecordsError
    from grae.eval.stats import paired_difference, passk_estimates
    from grae.train.oracle import ORACLE, oracle_counts

    oracle = oracle_counts(out, counts["base"])
    if oracle is None or int(oracle.n.min()) < max(table.ks):
        return
    try:
        versus = (paired_difference(oracle, counts["trained"], table.ks, bootstrap=BOOTSTRAP, seed=seed)[0]
                  if trained else None)
        table.rows[ORACLE] = passk_estimates(oracle, table.ks, bootstrap=BOOTSTRAP, seed=seed)
    except (RecordsError, ValueError):  # no problem in common with the trained rows: no oracle column
        return
    table.vs_oracle = versus


def markdown(table: HeldoutTable) -> str:
    """The table as report.md shows it, its caption below, and the format-only oracle's line where it has one."""
    lines = ["| held-out | " + " | ".join(table.rows) + " |", "|---|" + "---:|" * len(table.rows)]
    lines += [f"| pass@{k} | " + " | ".join(table.cells(k)) + " |" for k in table.ks]
    note = table.oracle_note()
    return "\n".join(lines) + f"\n\n{table.caption()}\n" + (f"\n**{note}**\n" if note else "")

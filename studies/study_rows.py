"""Carry a study's results across sittings and machines in git: ``pack`` and ``unpack``.

A long study (studies/design/decisive_r4.yaml: ~27 core-hours on this project's CPU) runs in several
sittings, and a sitting's machine may start without the previous one's ``runs/``. ``pack`` writes every
finished job's results, without weights or sample rows, into one deterministic archive per job under
``studies/rows/<study>/`` (committed); ``unpack`` restores the missing ones into the study's jobs folder,
where ``grae compare`` counts them as finished (``eval/summary.json`` present, no weights left to
evaluate), so it trains only the jobs no sitting has finished and its report reads every job::

    python studies/study_rows.py pack studies/design/decisive_r4.yaml     # after a sitting, then commit
    python studies/study_rows.py unpack studies/design/decisive_r4.yaml   # before the next one

What a job's archive holds: ``job.yaml``, ``config.yaml``, ``run.json``, ``metrics.jsonl`` (the training
log), ``eval/summary.json`` and every ``eval/frontier/step-N.curve.json`` / ``step-N.run.json`` (the
per-problem counts the report reads). The base model's evaluation (``base/frontier.*``) and the record of
every ``grae compare`` sitting (``invocations.jsonl``: the report's wall time) go in ``study.tgz``; ``unpack``
adds the archive's sitting rows this machine's record lacks, so sittings on several machines add up.
A job that is not finished (trained, and evaluated at every step compare evaluates it) is not packed; an
archive is rewritten only when its content changes (archives carry no timestamps, so packing twice gives the
same bytes).
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import tarfile
from pathlib import Path

from grae.compare.grid import CompareConfig, load_compare_config

JOB_FILES = ("job.yaml", "config.yaml", "run.json", "metrics.jsonl", "eval/summary.json")
FRONTIER_PATTERNS = ("eval/frontier/step-*.curve.json", "eval/frontier/step-*.run.json")
STUDY_FILES = ("base/frontier.jsonl", "base/frontier.curve.json", "base/frontier.run.json", "invocations.jsonl")
#: study files whose rows (lines) add up across machines instead of being kept as they are
MERGED_FILES = ("invocations.jsonl",)


def rows_dir(cfg: CompareConfig, root: Path = Path("studies/rows")) -> Path:
    return root / Path(cfg.source).stem


def job_members(job_dir: Path) -> list[Path]:
    """The files of a finished job that its archive holds, relative to ``job_dir``."""
    files = [Path(name) for name in JOB_FILES if (job_dir / name).is_file()]
    for pattern in FRONTIER_PATTERNS:
        files += sorted(p.relative_to(job_dir) for p in job_dir.glob(pattern))
    return files


def archive_bytes(folder: Path, members: list[Path]) -> bytes:
    """A gzip'd tar of ``members`` (relative to ``folder``) with every timestamp and owner zeroed."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in sorted(members):
            data = (folder / member).read_bytes()
            info = tarfile.TarInfo(member.as_posix())
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write_if_changed(path: Path, data: bytes) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def pack(cfg: CompareConfig, root: Path) -> list[str]:
    """Archive every finished job (and the base evaluation); returns the archives written."""
    target = rows_dir(cfg, root)
    written = []
    study_members = [Path(name) for name in STUDY_FILES if (cfg.output_dir / name).is_file()]
    if study_members and write_if_changed(target / "study.tgz", archive_bytes(cfg.output_dir, study_members)):
        written.append("study.tgz")
    from grae.compare.runner import finished

    for job in cfg.jobs():
        if not finished(cfg, job):  # not trained, or trained while compare's evaluation still runs
            continue
        name = f"{job.output_dir.parent.name}-seed{job.seed}.tgz"
        if write_if_changed(target / name, archive_bytes(job.output_dir, job_members(job.output_dir))):
            written.append(name)
    return written


def unpack(cfg: CompareConfig, root: Path) -> list[str]:
    """Restore the archived jobs this machine lacks (a job folder that is finished here is left alone;
    one that holds an unfinished run of the same job is completed with the archive's files)."""
    source = rows_dir(cfg, root)
    restored = []
    if (source / "study.tgz").exists():
        restored += extract(source / "study.tgz", cfg.output_dir, keep_existing=True, merge=MERGED_FILES)
    for job in cfg.jobs():
        archive = source / f"{job.output_dir.parent.name}-seed{job.seed}.tgz"
        if archive.exists() and not job.done:
            extract(archive, job.output_dir)
            restored.append(f"{job.method}/seed{job.seed}")
    return restored


def extract(archive: Path, folder: Path, *, keep_existing: bool = False, merge: tuple[str, ...] = ()) -> list[str]:
    """Write ``archive``'s files into ``folder`` (each atomically); with ``keep_existing`` a file already
    there is left alone, except those named in ``merge``, which gain the archive's lines they lack.
    Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.name.startswith("/") or ".." in Path(member.name).parts:
                raise ValueError(f"{archive}: unexpected member {member.name!r} (only the job's own files)")
        # summary.json last: a job counts as finished only once every other file is in place
        members = sorted(tar.getmembers(), key=lambda m: m.name == "eval/summary.json")
        for member in members:
            path = folder / member.name
            if keep_existing and path.exists() and member.name not in merge:
                continue
            data = tar.extractfile(member).read()
            if keep_existing and path.exists():
                have = path.read_bytes()
                lines = set(have.splitlines())
                new = [line for line in data.splitlines() if line.strip() and line not in lines]
                if not new:
                    continue
                data = have + (b"" if not have or have.endswith(b"\n") else b"\n") + b"\n".join(new) + b"\n"
            written.append(member.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python studies/study_rows.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["pack", "unpack"])
    parser.add_argument("study", help="the study's design YAML")
    parser.add_argument("--rows", default="studies/rows", help="where the archives live (default studies/rows)")
    args = parser.parse_args(argv)
    cfg = load_compare_config(args.study)
    done = (pack if args.action == "pack" else unpack)(cfg, Path(args.rows))
    verb = "packed" if args.action == "pack" else "restored"
    print(f"{verb} {len(done)}: {', '.join(done) or 'nothing new'} ({rows_dir(cfg, Path(args.rows))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

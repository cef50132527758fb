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
per-problem counts the report reads) / ``step-N.parts.json`` (the mechanism rows' probes). The base model's
evaluation (``base/frontier.*``, ``base/temperature_frontier.json``, ``base/probes.json``) and the record of
every ``grae compare`` sitting (``invocations.jsonl``: the report's wall time) go in ``study.tgz``; ``unpack``
adds the archive's sitting rows this machine's record lacks, so sittings on several machines add up.
A job that is not finished (trained, and evaluated at every step compare evaluates it) is not packed; an
archive is rewritten only when its content changes (archives carry no timestamps, so packing twice gives the
same bytes). A study without a study-level ``eval:`` whose jobs evaluate held-out is not packed at all: its
report reads each job's sample rows (``eval/after.jsonl``), which archives do not carry.

``unpack`` checks every archive before it writes anything (:func:`check_archive`): it must read whole (a cut
archive is refused), hold only the files above as plain files (no link, no ``..``, no absolute path), its JSON
and JSONL must parse, and its ``job.yaml`` must be this study's configuration of that job. It never writes into
a job folder that holds a run of another configuration, and never replaces a finished job. Any problem: one
line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import io
import json
import sys
import tarfile
import zlib
from pathlib import Path

import yaml

from grae.compare.grid import CompareConfig, load_compare_config
from grae.yaml_io import load_yaml

JOB_FILES = ("job.yaml", "config.yaml", "run.json", "metrics.jsonl", "eval/summary.json")
FRONTIER_PATTERNS = ("eval/frontier/step-*.curve.json", "eval/frontier/step-*.run.json",
                     "eval/frontier/step-*.parts.json")
STUDY_FILES = ("base/frontier.jsonl", "base/frontier.curve.json", "base/frontier.run.json",
               "base/temperature_frontier.json", "base/probes.json", "invocations.jsonl")
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


class RowsError(ValueError):
    """An archive or a job folder unpack will not touch, or a study pack cannot carry: one line."""


def pack(cfg: CompareConfig, root: Path) -> list[str]:
    """Archive every finished job (and the base evaluation); returns the archives written."""
    heldout = [job for job in cfg.jobs() if cfg.train_config(job).eval.enabled]
    if heldout and not cfg.eval:
        raise RowsError(f"{cfg.source}: no study-level eval:, so the report reads each job's sample rows "
                        "(eval/after.jsonl), which the archives do not carry; add eval: {…} to the study (compare then "
                        "evaluates each final model with it) before packing")
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
    one that holds an unfinished run of the same job is completed with the archive's files). Every archive
    is checked first (:func:`check_archive`, :func:`check_job_folder`): a problem raises :class:`RowsError`
    before anything is written."""
    source = rows_dir(cfg, root)
    study = source / "study.tgz"
    study_files = check_archive(study, STUDY_FILES) if study.exists() else None
    jobs = []
    for job in cfg.jobs():
        archive = source / f"{job.output_dir.parent.name}-seed{job.seed}.tgz"
        if archive.exists() and not job.done:
            files = check_archive(archive, (*JOB_FILES, *FRONTIER_PATTERNS), expected=_job_config(cfg, job))
            check_job_folder(job.output_dir, _job_config(cfg, job))
            jobs.append((job, files))
    restored = []
    if study_files is not None:
        restored += write_files(study_files, cfg.output_dir, keep_existing=True, merge=MERGED_FILES)
    for job, files in jobs:
        write_files(files, job.output_dir)
        restored.append(f"{job.method}/seed{job.seed}")
    return restored


def _job_config(cfg: CompareConfig, job) -> dict:
    from grae.train.config import to_dict

    return to_dict(cfg.train_config(job))


def check_archive(archive: Path, allowed: tuple[str, ...], expected: dict | None = None) -> dict[str, bytes]:
    """``archive``'s files (name → bytes), read whole and checked: only plain files named by ``allowed`` (names or
    patterns), JSON and JSONL that parse, and (``expected``: the job's configuration) a ``job.yaml`` holding that
    configuration. Raises :class:`RowsError` naming the archive and the problem."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = member.name
                if not member.isfile() or name.startswith("/") or ".." in Path(name).parts:
                    raise RowsError(f"{archive}: unexpected member {name!r} (a link, a folder, or outside its job; "
                                    "only the job's own files)")
                if not any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed):
                    raise RowsError(f"{archive}: unexpected member {name!r} (an archive holds {', '.join(allowed)})")
                if name in files:
                    raise RowsError(f"{archive}: holds {name!r} twice, and which copy is the job's cannot be told; "
                                    "pack it again from the machine that ran the job")
                files[name] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise RowsError(f"{archive}: cannot be read whole ({type(err).__name__}: {err}); pack it again from the "
                        "machine that ran the job") from None
    for name, data in files.items():
        try:
            if name.endswith(".json"):
                json.loads(data)
            elif name.endswith(".jsonl"):
                [json.loads(line) for line in data.splitlines() if line.strip()]
            elif name.endswith(".yaml"):
                load_yaml(data)
        except (ValueError, yaml.YAMLError, UnicodeDecodeError) as err:
            raise RowsError(f"{archive}: {name} does not parse ({' '.join(str(err).split())[:120]})") from None
    if expected is not None:
        if "eval/summary.json" not in files:
            raise RowsError(f"{archive}: no eval/summary.json, so not a finished job's archive")
        differs = _config_changes(load_yaml(files.get("job.yaml", b"")), expected)
        if differs:
            raise RowsError(f"{archive}: packed from another configuration of this job ({'; '.join(differs[:3])}); "
                            "pack it again from this study, or remove it")
    return files


def _config_changes(packed, expected: dict) -> list[str]:
    """What ``packed`` (an archive's ``job.yaml``) changes in the job's configuration ``expected``
    (grae.train.rundir.job_changes)."""
    from grae.train.rundir import job_changes

    if not isinstance(packed, dict):
        return [f"job.yaml: {packed!r}"]
    return job_changes(packed, expected)


def check_job_folder(folder: Path, expected: dict) -> None:
    """Refuse a job folder that holds a run of another configuration (its files would be replaced)."""
    from grae.train.config import ConfigError
    from grae.train.rundir import changes, owner

    try:
        record = owner(folder)
    except ConfigError as err:
        raise RowsError(f"{folder}: {err}; not overwritten") from None
    differs = changes(record, expected) if record is not None else []
    if differs:
        raise RowsError(f"{folder}: holds a run of another configuration ({'; '.join(differs[:3])}); not "
                        "overwritten: move it away to restore the archived job")


def extract(archive: Path, folder: Path, *, keep_existing: bool = False, merge: tuple[str, ...] = ()) -> list[str]:
    """Check ``archive`` (its files, :func:`check_archive`), then write them into ``folder`` (:func:`write_files`)."""
    return write_files(check_archive(archive, ("*",)), folder, keep_existing=keep_existing, merge=merge)


def write_files(files: dict[str, bytes], folder: Path, *, keep_existing: bool = False,
                merge: tuple[str, ...] = ()) -> list[str]:
    """Write ``files`` into ``folder`` (each atomically); with ``keep_existing`` a file already there is left
    alone, except those named in ``merge``, which gain the archive's lines they lack. Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    # summary.json last: a job counts as finished only once every other file is in place
    for name in sorted(files, key=lambda n: n == "eval/summary.json"):
        path = folder / name
        if keep_existing and path.exists() and name not in merge:
            continue
        data = files[name]
        if keep_existing and path.exists():
            have = path.read_bytes()
            lines = set(have.splitlines())
            new = [line for line in data.splitlines() if line.strip() and line not in lines]
            if not new:
                continue
            data = have + (b"" if not have or have.endswith(b"\n") else b"\n") + b"\n".join(new) + b"\n"
        written.append(name)
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
    from grae.train.config import ConfigError

    try:
        cfg = load_compare_config(args.study)  # refuses a job folder that holds a run of another configuration
        done = (pack if args.action == "pack" else unpack)(cfg, Path(args.rows))
    except (RowsError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    verb = "packed" if args.action == "pack" else "restored"
    print(f"{verb} {len(done)}: {', '.join(done) or 'nothing new'} ({rows_dir(cfg, Path(args.rows))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

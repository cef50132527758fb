"""``grae train [CONFIG] [--key value …]``: train with a grae estimator through TRL."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from grae.cli.output import check_writable, error
from grae.cli.output import console as make_console
from grae.eval.backends import NonFiniteLogitsError
from grae.printing import print_line
from grae.supervision.beacon import own_advice

# grae.train, yaml, huggingface_hub and torch are imported inside the functions that use them: every command module is
# imported on `grae --help`, which loads none of them


def parse_overrides(extra: list[str]) -> dict:
    """``--trl.learning_rate 3e-4 --task.name=gcd`` → ``{"trl.learning_rate": 3e-4, "task.name": "gcd"}``.
    Values are read as YAML scalars (numbers, booleans, null, lists)."""
    config, overrides = split_args(extra)
    if config is not None:
        raise typer.BadParameter(f"unexpected argument {config!r}; overrides look like --key value or --key=value")
    return overrides


def split_args(extra: list[str]) -> tuple[str | None, dict]:
    """The optional positional CONFIG and the ``--key value`` overrides, in any order. A flag with no
    value (``--trl.bf16``, followed by another ``--key`` or nothing) is ``true``, as in TRL's parser."""
    import yaml

    from grae.yaml_io import DuplicateKeyError, load_yaml

    config, overrides, i = None, {}, 0
    spelled: dict[str, str] = {}  # the key as grae reads it → the flag that gave it
    while i < len(extra):
        token = extra[i]
        if not token.startswith("--"):
            if config is not None:
                raise typer.BadParameter(f"unexpected argument {token!r}: CONFIG is already {config!r}; "
                                         "overrides look like --key value or --key=value")
            config = token
            i += 1
            continue
        key = token[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            value = extra[i + 1]
            i += 2
        else:
            value = "true"
            i += 1
        refuse_given_twice(spelled, key, f"--{token[2:]}" if "=" not in token else token.split("=", 1)[0])
        try:
            parsed = load_yaml(value)
            # "Answer:" is a string on a command line, not YAML's {"Answer": None}; a mapping is written {a: 1}
            overrides[key] = value if isinstance(parsed, dict) and not value.lstrip().startswith("{") else _scalar(parsed)
        except DuplicateKeyError as err:
            raise typer.BadParameter(f"--{key}: {err}") from None
        except yaml.YAMLError:
            overrides[key] = value  # not a YAML scalar: the plain string, checked against the key's type
    return config, overrides


def refuse_given_twice(spelled: dict[str, str], key: str, flag: str) -> None:
    """Record that ``flag`` gives ``key``; ``typer.BadParameter`` naming both flags when another one gave the same key
    in any spelling (``--seed`` twice, ``--max-steps`` and ``--max_steps``): the later one would win silently."""
    head, dot, rest = key.partition(".")
    name = head.replace("-", "_") + dot + rest
    if name in spelled:
        raise typer.BadParameter(f"{name}: given twice on the command line, as {spelled[name]} and as {flag}; "
                                 "keep one of them")
    spelled[name] = flag


def _once(flag: str, values: list | None):
    """The one value of a repeatable typer option, None when absent; ``typer.BadParameter`` when given twice."""
    if values and len(values) > 1:
        raise typer.BadParameter(f"{flag}: given twice on the command line ({', '.join(map(str, values))}); keep one")
    return values[0] if values else None


def _scalar(value):
    """YAML 1.1 reads ``3e-4`` as a string; numbers written that way are numbers here."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def model_unavailable(model: str) -> str | None:
    """Why a hub id (``org/name``, not a local directory or a preset) cannot be loaded, found in a few
    seconds: not in the local hub cache and the hub unreachable (or ``HF_HUB_OFFLINE`` set)."""
    from pathlib import Path

    from grae.presets import PRESETS

    if model in PRESETS or Path(model).expanduser().exists() or model.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.constants import HF_HUB_OFFLINE

        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - an invalid repo id: let the loader say so
        return None
    reason = "HF_HUB_OFFLINE is set" if HF_HUB_OFFLINE else _hub_unreachable()
    if reason:
        return (f"model: {model!r} is not a local directory, not in the hub cache ({reason}); "
                "download it where the hub is reachable (huggingface-cli download ORG/NAME) or pass a local directory")
    return None


def hub_push_unavailable(trl: dict) -> str | None:
    """Why ``trl.push_to_hub`` (or ``trl.log_completions_hub_repo``) cannot push (hub offline or unreachable,
    no token), found before the model loads; TRL would find out when it builds the Trainer or at the first save."""
    key = next((k for k in ("push_to_hub", "log_completions_hub_repo") if trl.get(k)), None)
    if key is None:
        return None
    from huggingface_hub import get_token
    from huggingface_hub.constants import HF_HUB_OFFLINE

    reason = "HF_HUB_OFFLINE is set" if HF_HUB_OFFLINE else _hub_unreachable()
    if reason is None and get_token() is None:
        reason = "no hub token: log in with `hf auth login` or set HF_TOKEN"
    if reason:
        return f"trl.{key}: cannot push to the hub ({reason}); drop --{key}, or push final/ later"
    return None


def wandb_unavailable(trl: dict) -> str | None:
    """Why ``trl.report_to: wandb`` would fail when the Trainer is built (no API key, not offline), found before
    the run directory is claimed: ``WANDB_API_KEY``, a ``wandb login`` (netrc) or ``WANDB_MODE=offline``."""
    import netrc
    from urllib.parse import urlparse

    names = trl.get("report_to")
    names = [names] if isinstance(names, str) else list(names or [])
    if "wandb" not in names:
        return None
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        if netrc.netrc(os.environ.get("NETRC")).authenticators(host):
            return None
    except (OSError, netrc.NetrcParseError):
        pass
    return ("trl.report_to: wandb has no API key here (no WANDB_API_KEY, no `wandb login`); log in, set WANDB_API_KEY, "
            "or log offline with WANDB_MODE=offline (wandb sync later)")


def dataset_unavailable(task_name: str, task_params: dict) -> str | None:
    """Why a hub dataset task (a recipe's ``dataset_name``, ``hf:ORG/NAME``, a registered hub task) cannot be read,
    found in a few seconds: not in the local caches and the hub offline or unreachable."""
    from grae.data import get_task
    from grae.data.hub import HubTask, hub_cached

    try:
        task = get_task(task_name, **task_params)
    except Exception:  # noqa: BLE001 - validated already; the loader says what is wrong
        return None
    if not isinstance(task, HubTask):
        return None
    missing = [s.path for s in (task.train_source, task.heldout_source) if s is not None and not hub_cached(s.path)]
    if not missing:
        return None
    from huggingface_hub.constants import HF_HUB_OFFLINE

    offline = HF_HUB_OFFLINE or os.environ.get("HF_DATASETS_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    reason = "HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set" if offline else _hub_unreachable()
    if reason is None:
        return None
    return (f"task.name: {task_name!r} reads the hub dataset {missing[0]}, which is not in the cache under HF_HOME "
            f"({reason}); download it where the hub is reachable (the same HF_HOME), or save its rows as JSONL and "
            "train on local:PATH (hf:ORG/NAME reads a cached hub copy)")


def vllm_unavailable(trl: dict) -> str | None:
    """Why ``trl.use_vllm`` cannot generate here (vLLM not installed), found before the model loads; TRL would
    find out when it builds the trainer, after the model and the data load."""
    from grae.eval.backends import vllm_installed

    if trl.get("use_vllm") and not vllm_installed():
        return ("trl.use_vllm: vLLM is not installed here (pip install vllm, on a CUDA machine); drop use_vllm to "
                "generate with transformers")
    return None


def _hub_unreachable(timeout: float = 3.0) -> str | None:
    import socket
    from urllib.parse import urlparse

    from huggingface_hub.constants import ENDPOINT

    host = urlparse(ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as err:
        return f"{host} unreachable: {err.strerror or err}"
    return None


def user_failure(console, err: BaseException, run_dir, *, debug: bool) -> None:
    """A failure of the user's code (a reward function) in ``err``: its one line first, the traceback to
    the run's error.log and, with ``--debug``, to the terminal; exit 1. Returns for any other failure."""
    import traceback

    from grae.train.user_errors import one_line, user_code_error, write_traceback

    cause = user_code_error(err)
    if cause is None:
        return
    log = write_traceback(err, run_dir)
    where = f"traceback in {log}" if log else "the run directory cannot be written"
    error(console, "error:", f"{one_line(cause)} ({where}; --debug prints it)")
    if debug:
        traceback.print_exception(err)
    raise typer.Exit(1) from None


def loading_problem(cfg) -> str | None:
    """Why training would stop here before the weights load, as the one line ``grae train`` stops with (exit 2):
    a preset whose package is missing, a model neither local nor in the hub cache with the hub unreachable, weight
    files cut short, a hub dataset not cached with the hub unreachable, a config or tokenizer that does not load or
    lacks the chat template the prompts need, a push without a token, W&B without a key, vLLM not installed.
    ``--dry-run`` reports the same line; None when nothing stops it."""
    from grae.data import get_task
    from grae.presets import preset_problem
    from grae.train.checkpoints import weights_problem
    from grae.train.model_files import tokenizer_problem
    from grae.train.trl_recipe import processor_load_kwargs

    why = (preset_problem(cfg.model) or model_unavailable(cfg.model) or weights_problem(cfg.model)
           or dataset_unavailable(cfg.task.name, cfg.task.params))
    if why:
        return why
    chat = getattr(get_task(cfg.task.name, **cfg.task.params), "prompt_style", None) == "chat"
    return (tokenizer_problem(cfg.model, chat, processor_load_kwargs(cfg.trl)) or hub_push_unavailable(cfg.trl)
            or wandb_unavailable(cfg.trl) or vllm_unavailable(cfg.trl))


def _dry_run(console, cfg) -> int:
    """``--dry-run``: what ``cfg`` resolved to, every resolved key, then the verdict; returns the exit status. A
    run that would stop — :func:`loading_problem` (the model not cached with the hub unreachable, a preset's
    missing wheel, a tokenizer without a chat template, a push without a token: exit 2, as the run), or data that
    leaves it nothing to learn from (no gold the verifier can match, no answer that fits in a token budget) or that
    does not fit in the model's context with its budget (exit 1) — is said first and last. The config is checked,
    the network only looked at."""
    from grae.train.config import to_dict
    from grae.train.dry_run import plan
    from grae.train.resolve import resolved_lines

    rows, stops = plan(cfg)
    note = loading_problem(cfg)
    verdict = None
    if note or stops:
        verdict = ("dry run: training here would stop: " + "; ".join(
            [*([f"before loading: {note}"] if note else []), *stops]))
        error(console, "error:", verdict)
    for what, value in rows:
        print_line(console, f"{what:>10}  {value}")
    print_line(console, "resolved config (every key; trl keys not listed are TRL's GRPOConfig defaults; diff two dry "
                        "runs to compare the runs):")
    for line in resolved_lines(to_dict(cfg)):
        print_line(console, f"  {line}")
    if verdict:
        error(console, "error:", verdict)
        return 2 if note else 1
    print_line(console, "dry run: the config is valid and nothing seen here stops the run; nothing was downloaded, "
                        "loaded, trained or written")
    return 0


def _print_help(ctx: typer.Context, _param, value: bool) -> None:
    """``grae train --help``: the command's options, then every config key with its default and help,
    generated from the schema (:func:`grae.train.schema.config_keys`)."""
    if not value or ctx.resilient_parsing:
        return
    from grae.train.schema import format_keys

    print(ctx.get_help())
    print()
    print(format_keys())
    ctx.exit()


def says_its_exit(command):
    """``command``'s own end (its return, or a ``typer.Exit`` it raises) is told to the supervisor
    (:func:`grae.supervision.beacon.finished`); any other end — ``sys.exit`` or ``os._exit`` in user code, a
    crash — is not, and the supervisor names it."""
    import functools

    from grae.supervision import beacon

    @functools.wraps(command)
    def run(*args, **kwargs):
        beacon.begin()
        try:
            command(*args, **kwargs)
        except typer.Exit as end:
            beacon.finished(end.exit_code)
            raise
        beacon.finished(0)

    return run


def register(app: typer.Typer) -> None:
    @app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                 options_metavar="[CONFIG] [OPTIONS] [--key value …]", add_help_option=False)
    @says_its_exit
    def train(
        ctx: typer.Context,
        _help: bool = typer.Option(False, "--help", "-h", is_eager=True, callback=_print_help, expose_value=False,
                                   help="Show this message and every config key (generated from the schema), and exit."),
        estimator: list[str] | None = typer.Option(None, help="Advantage estimator (grae estimators lists them)."),
        max_steps: list[int] | None = typer.Option(None, "--max-steps", help="Training steps."),
        seed: list[int] | None = typer.Option(None, help="Random seed."),
        output_dir: list[str] | None = typer.Option(None, "--output-dir", help="Run directory."),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in the run directory from its newest complete "
                                    "checkpoint (only max_steps and eval settings may change; a longer run re-evaluates)."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Clear a run directory that holds another run and start anew."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the rich progress bar."),
        threads: list[int] | None = typer.Option(None, "--threads", min=1, help="torch threads [default: OMP_NUM_THREADS "
                                           "when set, else 1 on a CPU (fastest beside any other busy process; "
                                           "docs/tiny.md) and torch's own on a GPU]."),
        debug: bool = typer.Option(False, "--debug", help="On a failure of your own code (a reward function), "
                                   "print the traceback after its one line (it is always in the run's error.log)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Check the config in full and say what it resolves to "
                                     "(model, task columns, every gold through the verifier, the token budget, "
                                     "the longest prompt against the model's context, reward functions, steps, "
                                     "then every resolved key), then exit: nothing is "
                                     "downloaded, loaded, trained or written."),
    ) -> None:
        """grae train [CONFIG] [--key value …]: train with a grae estimator (default: the embedded
        tiny model with A-GRAE), evaluate held-out pass@k before and after, and write a report.
        CONFIG is a YAML file or a packaged recipe name (default, tiny_vlm, smollm2, qwen25math7b_agrae, …).
        Extra --key value pairs override config keys (dotted: --trl.learning_rate 3e-4); for example
        --eval.enabled false skips the held-out evaluations, --sampling.dynamic true turns on dynamic
        sampling, --peft.r 16 trains a LoRA adapter, --trl.push_to_hub true --trl.hub_model_id ORG/NAME
        pushes the model. A GRPOConfig field may be given flat as in TRL (--learning_rate 1e-5), a flag
        without a value is true (--trl.bf16), and a trl grpo recipe YAML is read as it is (dataset_name, dtype,
        reward_funcs: accuracy_reward, …); --dry-run checks one without training. --help lists every key."""
        # several processes (accelerate launch, torchrun): the main one speaks
        main_rank = os.environ.get("RANK", "0") == "0"
        console = make_console(emoji=False, quiet=not main_rank)
        config, overrides = _command_line(list(ctx.args), {"estimator": estimator, "max_steps": max_steps,
                                                           "seed": seed, "output_dir": output_dir})
        threads = _once("--threads", threads)
        cfg = _load_config(console, config, overrides)
        if dry_run:
            raise typer.Exit(_dry_run(console, cfg))
        _check_before_run(console, cfg, resume=resume, main_rank=main_rank)
        result = _train(console, cfg, threads, resume=resume, overwrite=overwrite, progress=progress, debug=debug)
        _print_result(console, cfg, result)


def _command_line(extra: list[str], given: dict[str, list | None]) -> tuple[str | None, dict]:
    """CONFIG and the overrides: the ``--key value`` pairs in ``extra`` and the command's own options in ``given``
    (``--estimator``, ``--max-steps``, ``--seed``, ``--output-dir``); ``typer.BadParameter`` for a key given twice."""
    config, overrides = split_args(extra)
    for key, values in given.items():
        flag = "--" + key.replace("_", "-") if key in ("max_steps", "output_dir") else "--" + key
        if values:
            _once(flag, values)
            if key in overrides:
                raise typer.BadParameter(f"{key}: given twice on the command line, as {flag} and as --{key}; "
                                         "keep one of them")
            overrides[key] = values[0]
    return config, overrides


def _load_config(console, config: str | None, overrides: dict):
    """The resolved :class:`~grae.train.config.TrainConfig`; a config error is one line, exit 2."""
    from grae.train.config import ConfigError, load_config

    try:
        return load_config(config, overrides)
    except ConfigError as err:
        error(console, "config error", err)
        raise typer.Exit(2) from None


def _check_before_run(console, cfg, *, resume: bool, main_rank: bool) -> None:
    """What stops a run before it starts, as one line and exit 2: ``--resume`` of a directory that does not exist,
    an output directory that cannot be written, :func:`loading_problem`."""
    if resume and not os.path.isdir(cfg.output_dir):  # before the probe below, which would create it
        error(console, "config error", f"--resume: {cfg.output_dir} does not exist, so there is no run to continue; "
              "check --output-dir, or drop --resume to start a new run")
        raise typer.Exit(2)
    if main_rank:  # one probe: ranks racing to create and remove the same directory would fail
        check_writable(console, cfg.output_dir, "--output-dir")
    why = loading_problem(cfg)
    if why:
        error(console, "config error", why)
        raise typer.Exit(2)


def _train(console, cfg, threads: int | None, *, resume: bool, overwrite: bool, progress: bool, debug: bool):
    """Say what trains, then :func:`grae.train.run.run_train`: its result once it finished, else the exit status
    of the way it stopped (``typer.Exit``: an interrupted run, each failure as one line)."""
    from grae.train import run  # run.run_train read at call time
    from grae.train.threads import apply_threads

    cuda = _cuda_training(cfg)
    console.print(f"grae train: [bold]{escape(cfg.estimator)}[/bold] on {escape(cfg.task.name)} with "
                  f"{escape(cfg.model)} → {escape(cfg.output_dir)}; {escape(apply_threads(threads, cuda=cuda))}",
                  highlight=False, soft_wrap=True)
    for note in cfg.notes:  # sizes fitted to the data, as --dry-run says them
        print_line(console, f"note: {note}")
    run_dir = Path(os.path.abspath(cfg.output_dir))  # user code may chdir: the run stays where it was asked
    try:
        result = run.run_train(cfg, resume=resume, overwrite=overwrite, console=console, progress=progress)
    except (Exception, KeyboardInterrupt) as err:
        code = _failure_exit(console, err, run_dir, debug=debug)
        if code is None:
            raise
        raise typer.Exit(code) from None
    if result.interrupted_by is not None:
        raise typer.Exit(run.INTERRUPTED_EXIT.get(result.interrupted_by, 1))
    return result


def _failure_exit(console, err: BaseException, run_dir: Path, *, debug: bool) -> int | None:
    """The exit status of a run that raised ``err``, its one line said (a failure of the user's own code:
    :func:`user_failure`); None for any other failure, which is raised again with its traceback."""
    from grae.train.config import ConfigError
    from grae.train.faults import write_failure
    from grae.train.run import (
        INTERRUPTED_EXIT,
        BaseWithoutSignal,
        DiskFullError,
        DivergenceError,
        TrainingWithoutSignal,
    )

    if isinstance(err, ConfigError):
        error(console, "error:", err)
        return 2
    if isinstance(err, BaseWithoutSignal):  # the base cannot learn here: said before step 1, nothing trained
        error(console, "stopped before step 1:", f"{err}. Fix it and rerun (this run trained nothing, so a new run "
              "takes its directory), or train anyway with --continue-without-signal")
        return 1
    if isinstance(err, TrainingWithoutSignal):  # no_signal_steps steps in a row trained nothing: checkpoint saved
        where = f"checkpoint {err.checkpoint}" if err.checkpoint else "no checkpoint"
        error(console, f"stopped after step {err.step}:", f"{err}. Saved: {where}. Fix the cause and start anew "
              "(--overwrite, or another --output-dir), or continue this run with --resume --continue-without-signal")
        return NO_SIGNAL_EXIT
    if isinstance(err, (DiskFullError, DivergenceError)):  # the last complete (finite) checkpoint is named
        error(console, "error:", err)
        return 1
    if isinstance(err, NonFiniteLogitsError):  # held-out evaluation of a model that overflows (base or trained)
        error(console, "error: held-out evaluation:", err)
        return 1
    if isinstance(err, KeyboardInterrupt):  # a second Ctrl-C, or one during held-out evaluation (its rows are on disk)
        error(console, "interrupted:", own_advice())
        return INTERRUPTED_EXIT[signal.SIGINT]
    line = write_failure(err, run_dir)  # a write failure outside the guarded writers (run.json, metrics, …): one line
    if line is None:
        user_failure(console, err, run_dir, debug=debug)
        return None
    error(console, "error:", line)
    return 1


def _print_result(console, cfg, result) -> None:
    """The run's held-out table (or that evaluation was off), its oracle note, report and directory size."""
    summary = f"{cfg.estimator}: {result.steps} steps in {result.train_seconds:.0f}s"
    if result.before:
        from grae.train.heldout_table import heldout_table

        held = heldout_table(result.output_dir, result.before, result.after, cfg.eval.n, cfg.eval.seed)
        table = Table(title=escape(summary), caption=escape(held.caption()))
        table.add_column("held-out (%)")
        for row in held.rows:
            table.add_column(row, justify="right")
        for k in held.ks:
            table.add_row(f"pass@{k}", *map(escape, held.cells(k)))
        console.print(table)
        note = held.oracle_note()  # the trained model against the base with its wrong output mode removed
        if note:
            print_line(console, note)
        for line in result.exact_lines:  # the gain per stratum against the base's temperature frontier
            print_line(console, line)
    else:
        print_line(console, f"{summary}; held-out evaluation off (--eval.enabled false)")
    if result.report:
        print_line(console, f"report: {result.report}")
    print_line(console, run_size_line(result))


#: exit status of a run stopped after ``no_signal_steps`` steps in a row without learning signal (a checkpoint of
#: the last is saved; ``--resume --continue-without-signal`` continues it)
NO_SIGNAL_EXIT = 3


def _cuda_training(cfg) -> bool:
    """Training runs on a GPU: CUDA is there and the recipe does not ask for the CPU (trl.use_cpu)."""
    import torch

    return torch.cuda.is_available() and not cfg.trl.get("use_cpu")


def run_size_line(result) -> str:
    """``run directory: runs/default, 38.2 MB (final/ shares 14.0 MB of weight files with the last checkpoint)``."""
    from grae.train.disk import directory_size, human_bytes

    shared = (f" (final/ shares {human_bytes(result.shared_bytes)} of files with the last checkpoint: hard links, "
              "stored once)" if result.shared_bytes else "")
    return f"run directory: {result.output_dir}, {human_bytes(directory_size(result.output_dir))}{shared}"

"""The launch recipes in examples/ run as written: every shell script is executed by bash with the
real commands (python3, accelerate, trl, curl) replaced by recorders, and the exact arguments it
would launch with are checked — verl's Hydra overrides against grae's estimators/parameters and
verl's own config schema, `grae train` arguments against grae's config validation, accelerate
YAMLs through accelerate's own loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from timeouts import scaled

ROOT = Path(__file__).resolve().parent.parent
VERL_DIR = ROOT / "examples" / "verl"
TRL_DIR = ROOT / "examples" / "trl"
VERL_SCRIPTS = sorted(VERL_DIR.glob("run_*.sh"))
TRL_SCRIPTS = [TRL_DIR / "colocate.sh", TRL_DIR / "server.sh"]


SHIM = """#!{python}
import json, os, sys
if sys.argv[1:2] == ["-c"]:  # python3 -c "...check()" pre-flight: not a launch
    sys.exit(0)
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""

#: curl's recorder: a health check answers once the server it asks has started (its recorder wrote its line), as
#: vLLM's /health does; otherwise the launcher's EXIT trap could kill the background server before it is recorded.
CURL_SHIM = SHIM + """if any(arg.endswith("/health") for arg in sys.argv[1:]):
    import time
    deadline = time.monotonic() + 30
    while not any(line.startswith('["trl"') for line in open(os.environ["RECORD"])):
        if time.monotonic() > deadline:
            sys.exit(7)  # curl: failed to connect
        time.sleep(0.05)
"""


def run_recorded(script: Path, tmp_path: Path, *args: str, env: dict | None = None) -> list[list[str]]:
    """Run ``bash script args`` with python3/accelerate/trl/curl/grae replaced by recorders."""
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    for name in ("python3", "accelerate", "trl", "curl", "grae"):
        path = shims / name
        path.write_text((CURL_SHIM if name == "curl" else SHIM).format(python=sys.executable))
        path.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name in ("math_train.parquet", "math_heldout.parquet", "train.parquet", "test.parquet"):
        (data / name).write_bytes(b"")
    record = tmp_path / f"{script.stem}.jsonl"
    record.unlink(missing_ok=True)
    full_env = {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path), "RECORD": str(record),
                "DATA_DIR": str(data), "GEO3K_DIR": str(data), **(env or {})}
    proc = subprocess.run(["bash", str(script), *args], env=full_env, capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stderr[-3000:]}"
    return [json.loads(line) for line in record.read_text().splitlines()]


# -- verl ---------------------------------------------------------------------------------------------


def verl_overrides(script: Path, tmp_path: Path, *extra: str) -> list[str]:
    launches = [argv for argv in run_recorded(script, tmp_path, *extra) if argv[0] == "python3"]
    assert len(launches) == 1, launches
    argv = launches[0]
    assert argv[1:3] == ["-m", "grae.engines.verl.main"]  # verl's main_ppo after grae's config check
    return argv[3:]


def as_dict(overrides: list[str]) -> dict[str, str]:
    out = {}
    for item in overrides:
        key, value = item.split("=", 1)
        out[key] = value  # later overrides win, as in Hydra
    return out


#: The seeds' settings every verl recipe must carry (Yu et al. 2026 App. C.2; Zhu et al. 2025; Nan et al. 2025).
SEED_SETTINGS = {
    "data.train_batch_size": "1024",
    "actor_rollout_ref.rollout.n": "8",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
    "actor_rollout_ref.actor.optim.lr": "1e-6",
    "data.max_prompt_length": "1024",
    "data.max_response_length": "3072",
    "trainer.total_epochs": "20",
    "actor_rollout_ref.actor.use_kl_loss": "False",
    "actor_rollout_ref.actor.kl_loss_coef": "0",
    "algorithm.use_kl_in_reward": "False",
    "algorithm.kl_ctrl.kl_coef": "0",
    "actor_rollout_ref.rollout.temperature": "1.0",
    "trainer.n_gpus_per_node": "8",
    "actor_rollout_ref.model.path": "Qwen/Qwen2.5-Math-7B",
}

#: What distinguishes each recipe: estimator, its grae parameters, clip range, loss aggregation.
EXPECTED = {
    "run_grpo": ("grpo", {}, ("0.2", "0.2"), "token-mean"),
    "run_grpo_agrae": ("grae_agrae", {"alpha": "1.0"}, ("0.2", "0.2"), "token-mean"),
    "run_drgrpo_agrae": ("grae_agrae", {"alpha": "1.0", "scale": "none"}, ("0.2", "0.2"), "seq-mean-token-sum-norm"),
    "run_dapo_agrae": ("grae_agrae", {"alpha": "1.0"}, ("0.2", "0.28"), "token-mean"),
    "run_w_reinforce": ("grae_w_reinforce", {"lam": "0.1"}, ("0.2", "0.2"), "token-mean"),
    "run_ngrpo": ("grae_ngrpo", {"max_reward": "1.0", "num_virtual": "1"}, ("0.16", "0.24"), "token-mean"),
    "run_geo3k_agrae": ("grae_agrae", {"alpha": "0.5"}, ("0.2", "0.2"), "token-mean"),
}
#: The multimodal recipe follows the paper's Geometry3K run instead (App. C.2: Qwen2.5-VL-3B, 512 prompts,
#: G = 5, 20 epochs, alpha = 0.5) with images from verl's multimodal schema and verl's own Geo3K reward.
MULTIMODAL_SETTINGS = {
    "data.train_batch_size": "512",
    "actor_rollout_ref.rollout.n": "5",
    "trainer.total_epochs": "20",
    "data.image_key": "images",
    "actor_rollout_ref.model.path": "Qwen/Qwen2.5-VL-3B-Instruct",
    "actor_rollout_ref.actor.use_kl_loss": "False",
    "algorithm.use_kl_in_reward": "False",
}
MULTIMODAL = {"run_geo3k_agrae"}


def test_every_verl_recipe_is_listed():
    assert {p.stem for p in VERL_SCRIPTS} == set(EXPECTED)


@pytest.mark.parametrize("script", VERL_SCRIPTS, ids=lambda p: p.stem)
def test_verl_recipe_carries_the_seed_settings(script, tmp_path):
    overrides = verl_overrides(script, tmp_path)
    cfg = as_dict(overrides)
    for key, value in (MULTIMODAL_SETTINGS if script.stem in MULTIMODAL else SEED_SETTINGS).items():
        assert cfg.get(key) == value, f"{script.name}: {key}={cfg.get(key)!r}, expected {value}"
    estimator, params, (low, high), agg = EXPECTED[script.stem]
    assert cfg["algorithm.adv_estimator"] == estimator
    assert {k.removeprefix("+algorithm.grae."): v for k, v in cfg.items() if k.startswith("+algorithm.grae.")} == params
    assert (cfg["actor_rollout_ref.actor.clip_ratio_low"], cfg["actor_rollout_ref.actor.clip_ratio_high"]) == (low, high)
    assert cfg["actor_rollout_ref.actor.loss_agg_mode"] == agg
    if script.stem in MULTIMODAL:  # verl's own Geometry3K scorer, chosen by the rows' data_source
        assert not any(key.startswith("reward.custom_reward_function") for key in cfg)
    else:
        assert cfg["reward.custom_reward_function.path"] == "pkg://grae.engines.verl.reward"
    assert cfg["trainer.checkpoint_callback_class"] == "grae.engines.verl.checkpoint.GraeCheckpointCallback"
    # user overrides are appended last (Hydra: last one wins)
    assert verl_overrides(script, tmp_path, "trainer.total_epochs=1")[-1] == "trainer.total_epochs=1"


@pytest.mark.parametrize("script", VERL_SCRIPTS, ids=lambda p: p.stem)
def test_verl_recipe_names_real_estimators_and_parameters(script, tmp_path):
    """Every grae_* estimator exists in grae and every +algorithm.grae.<k> is one of its parameters
    (or an adapter option), and the adapter accepts the values exactly as Hydra would type them."""
    import yaml

    from grae.advantage import describe, get_estimator, names
    from grae.engines.verl.advantage import OPTION_KEYS, read_options

    cfg = as_dict(verl_overrides(script, tmp_path))
    name = cfg["algorithm.adv_estimator"]
    if not name.startswith("grae_"):
        assert name in {"grpo"}  # verl built-ins used by the baselines
        assert not any(k.startswith("+algorithm.grae.") for k in cfg)
        return
    grae_name = name.removeprefix("grae_")
    assert grae_name in names()
    valid = set(describe(grae_name)["defaults"]) | set(OPTION_KEYS)
    section = {}
    for key, value in cfg.items():
        if key.startswith("+algorithm.grae."):
            param = key.removeprefix("+algorithm.grae.")
            assert param in valid, f"{script.name}: {key}: not a parameter of {grae_name} ({sorted(valid)})"
            section[param] = yaml.safe_load(value)
    opts = read_options(grae_name, {"grae": section})
    get_estimator(grae_name, **opts["params"])


def test_verl_prepare_data_exports_with_grae(tmp_path):
    calls = run_recorded(VERL_DIR / "prepare_data.sh", tmp_path)
    assert [c[:3] for c in calls] == [["grae", "data", "export"]] * 2
    splits = [c[c.index("--split") + 1] for c in calls]
    assert splits == ["train", "heldout"] and calls[0][calls[0].index("--n") + 1] == "0"


@pytest.mark.verl
@pytest.mark.parametrize("script", VERL_SCRIPTS, ids=lambda p: p.stem)
def test_verl_recipe_is_valid_for_verl_itself(script, tmp_path):
    """Compose verl's own ppo_trainer config with the recipe's overrides (unknown keys fail), run
    verl's validate_config, build the actor config dataclass, resolve every class/function path."""
    try:
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.import_utils import load_class_from_fqn, load_extern_object
    except ImportError as err:
        pytest.fail(f"verl is not installed ({err}): `pip install -e '.[verl]'`; deselect with -m 'not verl'", pytrace=False)

    cfg = compose_recipe(script, tmp_path)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    from grae.engines.verl.main import check_config

    check_config(cfg)
    assert cfg.algorithm.filter_groups.max_num_gen_batches <= 0  # ignored by verl 0.9.1's v1 ReplayBuffer
    assert not need_critic(cfg) and not need_reference_policy(cfg)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.loss_agg_mode == EXPECTED[script.stem][3]
    assert cfg.algorithm.adv_estimator in core_algos.ADV_ESTIMATOR_REGISTRY
    assert actor.policy_loss.loss_mode in core_algos.POLICY_LOSS_REGISTRY
    if cfg.reward.custom_reward_function.path:
        fn = load_extern_object(cfg.reward.custom_reward_function.path, cfg.reward.custom_reward_function.name)
        assert callable(fn)
    else:  # verl's default scorer for the rows' data_source
        from verl.utils.reward_score import default_compute_score

        assert default_compute_score("hiyouga/geometry3k", "so \\boxed{3}", "3") >= 0.9
    load_class_from_fqn(cfg.trainer.checkpoint_callback_class, "CheckpointCallback")
    if cfg.algorithm.adv_estimator.startswith("grae_"):
        from grae.engines.verl.advantage import read_options, resolve_drop_renorm

        read_options(cfg.algorithm.adv_estimator.removeprefix("grae_"), cfg.algorithm)
        assert resolve_drop_renorm("auto", cfg.algorithm)[0] == actor.loss_agg_mode  # the actor's mode is reachable
    if script.stem == "run_drgrpo_agrae":
        assert cfg.algorithm.grae.scale == "none" and actor.loss_scale_factor == 3072
    if script.stem == "run_ngrpo":
        assert cfg.algorithm.filter_groups.enable and cfg.algorithm.filter_groups.metric == "grae_all_correct_filter"
        assert cfg.reward.custom_reward_function.name == "compute_score_ngrpo"


def compose_recipe(script: Path, tmp_path: Path, *extra: str):
    """verl's own ppo_trainer config composed with the overrides the recipe would launch with."""
    import verl
    from hydra import compose, initialize_config_dir

    overrides = verl_overrides(script, tmp_path, *extra)
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.mark.verl
def test_the_readme_overrides_compose_and_a_typo_stops_before_ray(tmp_path):
    """examples/verl/README.md: ``++`` changes a key the recipe sets; ``+`` on it is refused by Hydra; a
    parameter typo is refused by grae's launcher (grae.engines.verl.main) naming the valid ones."""
    from hydra.errors import ConfigCompositionException

    from grae.engines.verl.main import check_config

    script = VERL_DIR / "run_grpo_agrae.sh"
    readme = (VERL_DIR / "README.md").read_text()
    assert "run_grpo_agrae.sh trainer.total_epochs=1 ++algorithm.grae.alpha=0.5" in readme
    cfg = compose_recipe(script, tmp_path, "trainer.total_epochs=1", "++algorithm.grae.alpha=0.5")
    check_config(cfg)
    assert cfg.algorithm.grae.alpha == 0.5 and cfg.trainer.total_epochs == 1
    with pytest.raises(ConfigCompositionException, match="alpha"):
        compose_recipe(script, tmp_path, "+algorithm.grae.alpha=0.5")
    typo = compose_recipe(script, tmp_path, "+algorithm.grae.alhpa=0.5")
    with pytest.raises(TypeError, match="algorithm.grae.alhpa: .*its parameters are: alpha=1.0"):
        check_config(typo)
    stray = compose_recipe(VERL_DIR / "run_grpo.sh", tmp_path, "+algorithm.grae.alpha=0.5")
    with pytest.raises(ValueError, match="algorithm.adv_estimator='grpo' is not a grae estimator"):
        check_config(stray)


@pytest.mark.verl
def test_the_launcher_refuses_a_typo_in_one_line_before_verl_starts(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grae.engines.verl.main", "algorithm.adv_estimator=grae_agrae",
                           "+algorithm.grae.alhpa=0.5"], capture_output=True, text=True, timeout=scaled(120), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "grae: algorithm.grae.alhpa: estimator 'agrae'" in proc.stderr and "Traceback" not in proc.stderr


# -- TRL ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((TRL_DIR / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_load_through_accelerate(path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(path))
    assert str(cfg.distributed_type) in ("DistributedType.DEEPSPEED", "DEEPSPEED")
    assert cfg.deepspeed_config["zero_stage"] == 3 and cfg.mixed_precision == "bf16"
    assert cfg.num_processes == 8


@pytest.mark.parametrize("script", TRL_SCRIPTS, ids=lambda p: p.stem)
def test_a_key_the_user_gives_replaces_the_launchers_default(script, tmp_path):
    """`grae train` refuses a key given twice, so a launcher's own default gives way to the user's key (any
    spelling) and every key reaches grae train once; keys the user does not give keep the launcher's defaults."""
    given = ["--eval.enabled=true", "--trl.vllm-mode", "colocate", "--progress"]
    calls = run_recorded(script, tmp_path, "qwen25math7b_agrae", *given, env={"GRAE": "/opt/bin/grae"})
    (launch,) = [c for c in calls if c[0] == "accelerate"]
    args = launch[launch.index("/opt/bin/grae") + 3:]
    keys = [a.split("=")[0].lstrip("-").replace("-", "_") for a in args if a.startswith("--")]
    assert len(keys) == len(set(keys)), args
    assert args[-len(given):] == given and "--no-progress" not in args
    assert args[args.index("--trl.use_vllm") + 1] == "true"  # a default the user did not give


@pytest.mark.parametrize("script", TRL_SCRIPTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("recipe", ["qwen25math7b_agrae", "qwen25math7b_dapo_agrae", "qwen25math7b_drgrpo_agrae"])
def test_trl_launch_validates_as_grae_train_config(script, recipe, tmp_path):
    """The launcher's `grae train RECIPE --k v …` passes grae's own config validation (which builds
    TRL's GRPOConfig), and each step still sees 1,024 completions (128 prompts × G = 8)."""
    pytest.importorskip("trl", reason="the train extra; `make test` installs it")
    from grae.cli.train_cmd import parse_overrides
    from grae.train.config import load_config

    calls = run_recorded(script, tmp_path, recipe, "--seed", "3", env={"GRAE": "/opt/bin/grae"})
    (launch,) = [c for c in calls if c[0] == "accelerate"]
    assert launch[1] == "launch"
    config_file = Path(launch[launch.index("--config_file") + 1])
    assert config_file.exists() and config_file.parent == TRL_DIR / "accelerate"
    processes = int(launch[launch.index("--num_processes") + 1])
    i = launch.index("/opt/bin/grae")
    assert launch[i + 1:i + 3] == ["train", recipe]
    extra = [a for a in launch[i + 3:] if a not in ("--no-progress", "--progress")]
    cfg = load_config(recipe, parse_overrides(extra))
    assert cfg.seed == 3 and cfg.trl["use_vllm"] is True and cfg.eval.enabled is False
    completions = processes * cfg.trl["per_device_train_batch_size"] * cfg.trl.get("gradient_accumulation_steps", 1)
    assert completions == 1024 and completions % cfg.trl["num_generations"] == 0
    if script.stem == "server":
        (serve,) = [c for c in calls if c[0] == "trl"]
        assert serve[1] == "vllm-serve" and cfg.trl["vllm_mode"] == "server"
        assert serve[serve.index("--model") + 1] == cfg.model
        assert serve[serve.index("--port") + 1] == str(cfg.trl["vllm_server_port"])
    else:
        assert cfg.trl["vllm_mode"] == "colocate" and processes == 8

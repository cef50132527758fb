"""grae inside verl 0.9.1 on CPU: the entry point registers every estimator, verl's own
``compute_advantage`` returns exactly grae's advantages, verl's own ``ppo_loss`` runs grae's losses,
estimator state survives a verl checkpoint/resume, and TRL and verl agree on the same batch.

verl is required (``make test`` installs it): without it these tests FAIL with the install command.
Deselect explicitly with ``-m "not verl"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

from grae.advantage import get_estimator, names
from strategies import general_names
from timeouts import scaled
from tolerances import assert_close_scaled

pytestmark = pytest.mark.verl

HINT = ("verl is not installed: `pip install -e '.[verl]'` (verl==0.9.1 plus cachetools, fastapi, uvicorn for "
        "verl.trainer.ppo.ray_trainer); `make test` installs it. Deselect with -m 'not verl'.")


@pytest.fixture(scope="module")
def verl_api():
    """verl's own functions under test; fails (never skips) when verl is missing."""
    try:
        import verl  # noqa: F401  (loads the verl.plugins entry points)
        from verl import DataProto
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.ray_trainer import compute_advantage
    except ImportError as err:
        pytest.fail(f"{HINT} ({err})", pytrace=False)
    # Normally already imported by `import verl` through the entry point; importing it here keeps the
    # behaviour tests independent of it (the entry point has its own test below).
    import grae.engines.verl.plugin  # noqa: F401
    return {"DataProto": DataProto, "core_algos": core_algos, "compute_advantage": compute_advantage}


@pytest.fixture(autouse=True)
def _fresh_adapter_state():
    from grae.engines.verl import advantage

    advantage.reset()
    yield
    advantage.reset()


# -- batches ---------------------------------------------------------------------------------------

T = 7


def make_batch(rewards, group_of, lengths=None, *, seed=0, reward_position="last"):
    """verl-shaped inputs: token_level_rewards [bs, T] with the outcome on the last response token,
    response_mask [bs, T] (right-padded), uid strings (np.ndarray[object])."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    bs = rewards.numel()
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (bs,), generator=g) if lengths is None else torch.as_tensor(lengths)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float32)
    tlr = torch.zeros(bs, T)
    tlr[torch.arange(bs), lengths - 1] = rewards
    uid = np.array([f"uid-{int(k):04d}-{zlib.crc32(str(int(k)).encode())}" for k in group_of], dtype=object)
    return tlr, mask, uid


def grouped(num_groups=6, size=4, *, seed=0, binary=True):
    """Mixed groups (all-correct, all-wrong, partial), shuffled so groups are not contiguous."""
    g = torch.Generator().manual_seed(seed)
    group_of = torch.arange(num_groups).repeat_interleave(size)
    if binary:
        p = torch.linspace(0, 1, num_groups).repeat_interleave(size)
        rewards = (torch.rand(num_groups * size, generator=g) < p).float()
        rewards[:size] = 0.0
        rewards[size:2 * size] = 1.0
    else:
        rewards = torch.rand(num_groups * size, generator=g)
    perm = torch.randperm(num_groups * size, generator=g)
    return rewards[perm], group_of[perm]


def core_token_advantages(est, rewards, group_of, mask):
    out = est(rewards.float(), torch.as_tensor(group_of))
    return out.advantages.unsqueeze(-1) * mask, out


def verl_advantages(api, name, tlr, mask, uid, grae_cfg=None, *, config=None):
    from omegaconf import OmegaConf

    data = api["DataProto"].from_dict(tensors={"token_level_rewards": tlr.clone(), "response_mask": mask.clone()},
                                      non_tensors={"uid": uid})
    if config is None:
        config = OmegaConf.create({"adv_estimator": name, "grae": grae_cfg or {}})
    out = api["compute_advantage"](data, name, config=config)
    return out.batch["advantages"], out.batch["returns"]


# -- registration -------------------------------------------------------------------------------------


def test_entry_point_is_declared_and_plain_import_verl_registers_everything():
    """A fresh interpreter, no env vars: `import verl` alone finds every grae name via the entry point."""
    from importlib.metadata import entry_points

    from grae.engines.verl import ENTRY_POINT, estimator_names

    declared = {(ep.name, ep.value) for ep in entry_points(group="verl.plugins") if ep.dist and ep.dist.name == "grae"}
    assert ENTRY_POINT in declared, (
        f"no verl.plugins entry point {ENTRY_POINT}; pyproject needs "
        f'[project.entry-points."verl.plugins"] {ENTRY_POINT[0]} = "{ENTRY_POINT[1]}" (then reinstall)')
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")}
    code = ("import json, sys, verl\n"
            "from verl.trainer.ppo import core_algos as c\n"
            "print(json.dumps({'adv': sorted(c.ADV_ESTIMATOR_REGISTRY), 'loss': sorted(c.POLICY_LOSS_REGISTRY),"
            " 'loaded': 'grae.engines.verl.plugin' in sys.modules}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=scaled(120))
    if proc.returncode != 0 and "No module named 'verl'" in proc.stderr:
        pytest.fail(HINT, pytrace=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["loaded"]
    from grae.engines.verl.losses import LOSSES  # imports verl: after the check that it is installed

    assert set(estimator_names()) <= set(seen["adv"])
    assert set(LOSSES) <= set(seen["loss"])
    assert len(estimator_names()) == len(names())


def test_check_passes_in_process_and_names_are_namespaced(verl_api):
    import grae.engines.verl as gv

    present = gv.check()
    assert present["estimators"] == sorted(gv.estimator_names())
    from grae.engines.verl.losses import LOSSES

    assert present["losses"] == sorted(LOSSES)
    builtin = {e.value for e in verl_api["core_algos"].AdvantageEstimator}
    assert not builtin & set(present["estimators"])  # 'grpo'/'gae' are special-cased by verl's dispatcher
    assert gv.verl_name("agrae") == "grae_agrae" and gv.grae_name("grae_agrae") == "agrae"


def test_a_failing_plugin_is_loud_although_verl_swallows_it(tmp_path):
    """Make registration fail (a foreign function already holds grae_grpo): verl still imports,
    but the plugin logged at ERROR and check() raises the real cause."""
    (tmp_path / "squatter.py").write_text(
        "from verl.trainer.ppo.core_algos import register_adv_est\n"
        "register_adv_est('grae_grpo')(lambda **kw: None)\n")
    # a throw-away distribution on sys.path declaring grae's entry point (independent of the install)
    dist = tmp_path / "grae_plugin_probe-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: grae-plugin-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text("[verl.plugins]\ngrae_probe = grae.engines.verl.plugin\n")
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="squatter",
               PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)
    code = ("import verl, grae.engines.verl as gv\n"
            "try:\n    gv.check()\nexcept RuntimeError as e:\n    print('CHECK-RAISED:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CHECK-RAISED:" in proc.stdout and "grae_grpo" in proc.stdout and "already registered" in proc.stdout
    assert "ERROR" in proc.stderr and "grae's verl plugin failed" in proc.stderr


def test_register_is_idempotent_and_refuses_a_clash(verl_api, monkeypatch):
    from grae.engines.verl.plugin import register

    registry = verl_api["core_algos"].ADV_ESTIMATOR_REGISTRY
    before = dict(registry)
    register()
    assert registry == before
    monkeypatch.setitem(registry, "grae_rloo", lambda **kw: None)
    with pytest.raises(ValueError, match="grae_rloo.*already registered"):
        register()


# -- advantages through verl's own compute_advantage ------------------------------------------------------


@pytest.mark.parametrize("name", general_names())
def test_verl_compute_advantage_equals_grae_core(verl_api, name):
    """verl's dispatcher → grae_<name> gives exactly the core's A_i on every response token, masked;
    for 3 consecutive steps (stateful estimators keep their state in the driver-side cache)."""
    core = get_estimator(name)
    for step in range(3):
        rewards, group_of = grouped(seed=step)
        tlr, mask, uid = make_batch(rewards, group_of, seed=step)
        expected, out = core_token_advantages(core, rewards, group_of, mask)
        adv, ret = verl_advantages(verl_api, f"grae_{name}", tlr, mask, uid, {"drop_renorm": "none"})
        assert adv.shape == (rewards.numel(), T) and adv.dtype == torch.float32
        torch.testing.assert_close(adv, expected, rtol=0, atol=0)
        assert torch.equal(ret, adv)
        assert bool((adv[mask == 0] == 0).all())
    if name == "avspo":
        from grae.engines.verl.advantage import CACHE

        (cached,) = CACHE.values()
        assert cached.state_dict() == core.state_dict() and cached.state_dict()["step"] == 3


def test_grae_grpo_equals_verls_own_grpo(verl_api):
    rewards, group_of = grouped(binary=False, seed=3)
    tlr, mask, uid = make_batch(rewards, group_of, seed=3)
    mine, _ = verl_advantages(verl_api, "grae_grpo", tlr, mask, uid)
    theirs, _ = verl_advantages(verl_api, "grpo", tlr, mask, uid)
    assert_close_scaled(mine, theirs, rel=1e-5)


def test_parameters_come_from_algorithm_grae(verl_api):
    rewards, group_of = grouped(seed=4)
    tlr, mask, uid = make_batch(rewards, group_of, seed=4)
    expected, _ = core_token_advantages(get_estimator("agrae", alpha=0.5, scale="none"), rewards, group_of, mask)
    adv, _ = verl_advantages(verl_api, "grae_agrae", tlr, mask, uid, {"alpha": 0.5, "scale": "none"})
    torch.testing.assert_close(adv, expected, rtol=0, atol=0)
    assert not torch.equal(adv, verl_advantages(verl_api, "grae_agrae", tlr, mask, uid)[0])

    from grae.advantage import with_reward_correction

    corr = {"mode": "backward", "rho0": 0.1, "rho1": 0.2}
    expected, _ = core_token_advantages(with_reward_correction(get_estimator("grpo"), **corr), rewards, group_of, mask)
    adv, _ = verl_advantages(verl_api, "grae_grpo", tlr, mask, uid, {"reward_correction": corr})
    torch.testing.assert_close(adv, expected, rtol=0, atol=0)

    with pytest.raises(TypeError, match=r"algorithm\.grae\.alpha.*'grpo'.*no parameter"):
        verl_advantages(verl_api, "grae_grpo", tlr, mask, uid, {"alpha": 0.5})
    with pytest.raises(ValueError, match="drop_renorm"):
        verl_advantages(verl_api, "grae_psr", tlr, mask, uid, {"drop_renorm": "sum"})


def test_metrics_are_reachable_and_written(verl_api, tmp_path):
    import grae.engines.verl as gv

    rewards, group_of = grouped(seed=5)
    tlr, mask, uid = make_batch(rewards, group_of, seed=5)
    path = tmp_path / "m" / "grae_metrics.jsonl"
    for _ in range(2):
        verl_advantages(verl_api, "grae_agrae", tlr, mask, uid, {"metrics_path": str(path)})
    m = gv.last_metrics()
    assert m["estimator"] == "grae_agrae" and 0 < m["omega"] < 1 and "agrae/suppression" in m
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["omega"] == pytest.approx(m["omega"])


def test_missing_uid_is_an_error_not_a_silent_single_group(verl_api):
    tlr, mask, _ = make_batch([1.0, 0.0], [0, 0])
    data = verl_api["DataProto"].from_dict(tensors={"token_level_rewards": tlr, "response_mask": mask})
    with pytest.raises(ValueError, match="uid"):
        verl_api["compute_advantage"](data, "grae_grpo", config={"grae": {}})


# -- dropped samples: renormalised advantages reproduce grae's weighted normaliser ----------------------


@pytest.mark.parametrize("name", ["psr", "nsr", "dgpo"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_drop_renorm_makes_verls_normaliser_grae_s(verl_api, name, mode):
    """A dropped sample stays in verl's batch (and normaliser); scaling the kept advantages by the
    batch-level factor makes verl's vanilla loss equal grae's weighted loss (one mini-batch)."""
    from omegaconf import OmegaConf

    from grae.loss import policy_loss

    rewards, group_of = grouped(seed=6)
    tlr, mask, uid = make_batch(rewards, group_of, seed=6)
    root = OmegaConf.create({"actor_rollout_ref": {"actor": {"loss_agg_mode": mode}},
                             "algorithm": {"adv_estimator": f"grae_{name}", "grae": {}}})
    adv, _ = verl_advantages(verl_api, f"grae_{name}", tlr, mask, uid, config=root.algorithm)  # drop_renorm=auto
    out = get_estimator(name)(rewards, torch.as_tensor(group_of))
    assert bool((out.weights == 0).any()) and bool((out.weights == 1).any())

    g = torch.Generator().manual_seed(7)
    old = -torch.rand(mask.shape, generator=g) - 0.5
    logp = old + 0.3 * torch.randn(mask.shape, generator=g)
    actor = actor_config(("actor_rollout_ref.actor.loss_agg_mode=" + mode,))
    actor.global_batch_info.clear()
    verl_loss, _ = verl_api["core_algos"].get_policy_loss_fn("vanilla")(
        old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask.bool(), loss_agg_mode=mode,
        config=actor, rollout_is_weights=None)
    grae_loss, _ = policy_loss(logp, old, out.advantages, mask, weights=out.weights, clip_low=0.2, clip_high=0.2,
                               dual_clip=3.0, agg=mode, norm_length=T)
    assert_close_scaled(verl_loss, grae_loss, rel=1e-5, scale=float(adv.abs().max()))
    unscaled, _ = verl_advantages(verl_api, f"grae_{name}", tlr, mask, uid, {"drop_renorm": "none"})
    assert not torch.allclose(unscaled, adv)  # tol: asserts a difference: renormalising scales kept rows by ≫ 1e-5


# -- losses through verl's own worker loss (verl.workers.utils.losses.ppo_loss) --------------------------

_ACTORS: dict = {}


def actor_config(overrides=()):
    """An ActorConfig exactly as verl's workers build it: Hydra-composed ppo_trainer + overrides."""
    import verl
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    key = tuple(overrides)
    if key not in _ACTORS:
        config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=[
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=4", *overrides])
        _ACTORS[key] = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    return _ACTORS[key]


def worker_loss(actor, old, logp, adv, mask, *, is_weights=None):
    """Call verl's ppo_loss(config, model_output, data) with a padded TensorDict and a flat
    (no-padding) log-prob output laid out as verl's engines produce it."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    bs, prompt_len = mask.shape[0], 2
    lens = mask.sum(-1).long()
    flat = torch.cat([torch.cat([logp.new_zeros(prompt_len - 1), logp[i, : lens[i]], logp.new_zeros(1)]) for i in range(bs)])
    fields = {"prompts": torch.ones(bs, prompt_len, dtype=torch.long),
              "responses": torch.ones(bs, mask.shape[1], dtype=torch.long),
              "attention_mask": torch.cat([torch.ones(bs, prompt_len), mask], 1).long(), "response_mask": mask,
              "old_log_probs": old, "advantages": adv}
    if is_weights is not None:
        fields["rollout_is_weights"] = is_weights
    data = TensorDict(fields, batch_size=[bs])
    tu.assign_non_tensor_data(data, "dp_size", 1)
    tu.assign_non_tensor_data(data, "batch_num_tokens", int(mask.sum()))
    tu.assign_non_tensor_data(data, "global_batch_size", bs)
    loss, metrics = ppo_loss(actor, {"log_probs": flat}, data)
    return loss, {k: float(v.values[-1]) if hasattr(v, "values") else float(v) for k, v in metrics.items()}


GRAE_LOSS = ("actor_rollout_ref.actor.policy_loss._target_=grae.engines.verl.losses.GraePolicyLossConfig",
             "actor_rollout_ref.actor.policy_loss.loss_mode=grae_ppo")


def loss_inputs(seed=0, bs=6):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (bs,), generator=g)
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    old = -torch.rand(bs, T, generator=g) - 0.5
    logp = (old + 0.4 * torch.randn(bs, T, generator=g)).requires_grad_()
    adv = torch.randn(bs, 1, generator=g) * mask
    return old, logp, adv, mask


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_grae_losses_via_verls_ppo_loss(verl_api, mode):
    agg = f"actor_rollout_ref.actor.loss_agg_mode={mode}"
    clip = ("actor_rollout_ref.actor.clip_ratio_low=0.16", "actor_rollout_ref.actor.clip_ratio_high=0.24")
    old, logp, adv, mask = loss_inputs()
    is_w = torch.rand(mask.shape, generator=torch.Generator().manual_seed(1)) + 0.5

    vanilla, vm = worker_loss(actor_config((agg, *clip)), old, logp, adv, mask, is_weights=is_w)
    mine, mm = worker_loss(actor_config((agg, *clip, *GRAE_LOSS)), old, logp, adv, mask, is_weights=is_w)
    assert "actor/grae/clipfrac_low" in mm and "actor/grae/clipfrac_low" not in vm  # grae's loss really ran
    assert_close_scaled(mine, vanilla, rel=1e-5, scale=float(adv.abs().max()))  # defaults: token ratio + dual clip = vanilla
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        # tol: clip fractions in [0, 1]; ppo_kl a mean of log-ratios of order 0.4 (loss_inputs): rounding ≤ 1e-7
        assert mm[key] == pytest.approx(vm[key], abs=1e-6)

    gspo, _ = worker_loss(actor_config((agg, *clip, "actor_rollout_ref.actor.policy_loss.loss_mode=gspo")), old, logp, adv, mask)
    seq_no_dual, _ = worker_loss(actor_config((agg, *clip, *GRAE_LOSS,
                                               "+actor_rollout_ref.actor.policy_loss.ratio_level=sequence",
                                               "+actor_rollout_ref.actor.policy_loss.dual_clip=false")), old, logp, adv, mask)
    assert_close_scaled(seq_no_dual, gspo, rel=1e-5, scale=float(adv.abs().max()))

    # What verl lacks: sequence ratio + dual clip (grae_gspo needs no config subclass) equals grae's core loss.
    from grae.loss import policy_loss

    seq_dual, _ = worker_loss(actor_config((agg, *clip, "actor_rollout_ref.actor.policy_loss.loss_mode=grae_gspo")),
                              old, logp, adv, mask)
    weights = (mask.sum(-1) > 0).float() if mode != "token-mean" else None
    core, _ = policy_loss(logp, old, adv, mask, weights=weights, clip_low=0.16, clip_high=0.24, dual_clip=3.0,
                          ratio_level="sequence", agg=mode, norm_length=T)
    assert_close_scaled(seq_dual, core, rel=1e-5, scale=float(adv.abs().max()))
    seq_dual.backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all() and logp.grad.abs().sum() > 0


def test_policy_loss_config_subclass_validates():
    from grae.engines.verl.losses import GraePolicyLossConfig

    cfg = GraePolicyLossConfig(ratio_level="sequence", dual_clip=False)
    assert cfg.loss_mode == "grae_ppo" and cfg.get("ratio_level") == "sequence"
    with pytest.raises(ValueError, match="ratio_level"):
        GraePolicyLossConfig(ratio_level="segment")


def test_dual_clip_off_differs_from_vanilla_only_on_negative_advantages(verl_api):
    old, logp, adv, mask = loss_inputs(seed=2)
    logp = (old + 2.0).detach()  # ratio e^2 > clip_ratio_c = 3: dual clip active where A < 0
    on, _ = worker_loss(actor_config(GRAE_LOSS), old, logp, adv, mask)
    off, _ = worker_loss(actor_config((*GRAE_LOSS, "+actor_rollout_ref.actor.policy_loss.dual_clip=false")), old, logp, adv, mask)
    assert off > on
    pos = adv.clamp(min=0)
    on, _ = worker_loss(actor_config(GRAE_LOSS), old, logp, pos, mask)
    off, _ = worker_loss(actor_config((*GRAE_LOSS, "+actor_rollout_ref.actor.policy_loss.dual_clip=false")), old, logp, pos, mask)
    assert_close_scaled(on, off, rel=1e-5, scale=float(pos.abs().max()))


# -- state across a verl checkpoint / resume ----------------------------------------------------------------


def _trainer_config(tmp_path, **trainer):
    from omegaconf import OmegaConf

    base = {"default_local_dir": str(tmp_path / "ckpt"), "resume_mode": "auto", "resume_from_path": None,
            "checkpoint_callback_class": "grae.engines.verl.checkpoint.GraeCheckpointCallback"}
    base.update(trainer)
    return OmegaConf.create({"trainer": base, "actor_rollout_ref": {"actor": {"loss_agg_mode": "token-mean"}},
                             "algorithm": {"adv_estimator": "grae_avspo", "grae": {"eta": 0.2}}})


def _verl_save(cb, root, step):
    """What verl's v1 _save_checkpoint does around the callback: data.pt, tracker file, on_save."""
    folder = os.path.join(root.trainer.default_local_dir, f"global_step_{step}")
    os.makedirs(folder, exist_ok=True)
    torch.save({"dataloader": step}, os.path.join(folder, "data.pt"))
    with open(os.path.join(root.trainer.default_local_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(step))
    cb.on_save(trainer=None, global_step=step, checkpoint_dir=folder)


def _steps(verl_api, root, seeds):
    """AVSPO steps whose collapse rate and mean reward vary, so τ moves and virtual samples switch on."""
    outs = []
    for s in seeds:
        g = torch.Generator().manual_seed(100 + s)
        num_groups, collapsed = 8, [3, 6, 2, 7, 5][s % 5]
        rewards = (torch.rand(num_groups, 4, generator=g) < 0.5).float()
        rewards[:collapsed] = float(s % 2)  # all-correct or all-wrong groups
        rewards[collapsed:, 0], rewards[collapsed:, 1] = 1.0, 0.0  # the others are mixed
        perm = torch.randperm(num_groups * 4, generator=g)
        group_of = torch.arange(num_groups).repeat_interleave(4)[perm]
        tlr, mask, uid = make_batch(rewards.reshape(-1)[perm], group_of, seed=s)
        outs.append(verl_advantages(verl_api, "grae_avspo", tlr, mask, uid, config=root.algorithm)[0])
    return outs


def test_avspo_state_survives_verl_checkpoint_and_resume(verl_api, tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
    from verl.utils.import_utils import load_class_from_fqn

    from grae.engines.verl import advantage
    from grae.engines.verl.checkpoint import GraeCheckpointCallback, resume_folder

    root = _trainer_config(tmp_path)
    cls = load_class_from_fqn(root.trainer.checkpoint_callback_class, "CheckpointCallback")  # as verl does
    uninterrupted = _steps(verl_api, root, range(5))  # reference run: 5 steps, no restart
    tau_reference = next(iter(advantage.CACHE.values())).state_dict()["tau"]
    assert tau_reference != 0.5  # τ moved (η = 0.2), so a lost state would change later steps
    advantage.reset()

    cb = cls(config=root)
    assert isinstance(cb, GraeCheckpointCallback) and advantage.RESUME["folder"] is None
    first = _steps(verl_api, root, range(3))
    _verl_save(cb, root, 3)
    saved = json.loads((tmp_path / "ckpt" / "global_step_3" / "grae_estimator_state.json").read_text())
    assert saved["global_step"] == 3 and list(saved["estimators"].values())[0]["state"]["step"] == 3

    advantage.reset()  # a new driver process
    cb = cls(config=root)
    assert resume_folder(root) == find_latest_ckpt_path(root.trainer.default_local_dir)  # verl's own rule
    resumed = first + _steps(verl_api, root, range(3, 5))
    for a, b in zip(resumed, uninterrupted):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert next(iter(advantage.CACHE.values())).state_dict()["tau"] == tau_reference

    advantage.reset()  # the same restart with the state lost: step 5 (τ 0.5 instead of 0.66) differs
    lost = _steps(verl_api, root, range(3, 5))
    assert not torch.equal(lost[-1], uninterrupted[-1])


def test_resume_without_saved_state_is_refused_unless_fresh(verl_api, tmp_path):
    from grae.engines.verl import advantage
    from grae.engines.verl.checkpoint import GraeCheckpointCallback

    root = _trainer_config(tmp_path)
    folder = tmp_path / "ckpt" / "global_step_2"
    folder.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    GraeCheckpointCallback(config=root)
    with pytest.raises(FileNotFoundError, match="grae_estimator_state.json does not exist.*resume_state=fresh"):
        _steps(verl_api, root, [0])
    advantage.CACHE.clear()
    root.algorithm.grae.resume_state = "fresh"
    _steps(verl_api, root, [0])  # restarts from the defaults
    disabled = _trainer_config(tmp_path, resume_mode="disable")
    advantage.reset()
    GraeCheckpointCallback(config=disabled)
    assert advantage.RESUME["folder"] is None


# -- the same estimator through TRL (GraeTrainer) and verl ----------------------------------------------------


G = 4


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    pytest.importorskip("trl", reason="the TRL engine is the `train` extra; `make test` installs it")
    from tiny_model import build_random_tiny

    return build_random_tiny(str(tmp_path_factory.mktemp("tiny-verl")))


@pytest.mark.parametrize("name,params", [("agrae", {"alpha": 0.5}), ("psr", {}), ("avspo", {"r_max": 1.0})])
def test_trl_and_verl_give_identical_advantages(verl_api, tiny_dir, tmp_path, name, params):
    """One GraeTrainer step on the tiny model records the rewards it fed its estimator and the
    advantages it trained with; verl's compute_advantage on the same rewards, with one uid per
    TRL group (contiguous runs of num_generations), returns the same numbers on every token."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from grae.engines.trl import GraeTrainer

    class Recording(GraeTrainer):
        seen: list = []

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            self.seen.append((self._last_rewards_per_func.sum(1).clone(), out["advantages"].clone()))
            return out

    def parity_reward(completions, **kwargs):
        return [float(zlib.crc32(c.encode()) % 2) for c in completions]

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      max_steps=1, learning_rate=1e-3, per_device_train_batch_size=4 * G, num_generations=G,
                      max_completion_length=4, temperature=1.0, top_k=0, beta=0.0, gradient_checkpointing=False,
                      dataloader_num_workers=0, seed=0, disable_tqdm=True)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(tiny_dir), processing_class=tok,
                        reward_funcs=[parity_reward], args=args,
                        train_dataset=Dataset.from_list([{"prompt": f"What is {a} + 1?\nAnswer:"} for a in range(8)]),
                        estimator=name, estimator_params=params)
    trainer.seen = []
    trainer.train()
    (rewards, trl_adv), = trainer.seen

    n = rewards.numel()
    group_of = torch.arange(n) // G
    tlr, mask, uid = make_batch(rewards, group_of, seed=11)
    verl_adv, _ = verl_advantages(verl_api, f"grae_{name}", tlr, mask, uid, {**params, "drop_renorm": "none"})
    torch.testing.assert_close(verl_adv, trl_adv.float().unsqueeze(-1) * mask, rtol=0, atol=0)


# -- data export and the reward function ------------------------------------------------------------------


class FakeTask:
    """A grae.data-shaped task: train(n, seed) / heldout(n) dicts and score(completion, example)."""

    name = "toy_math"

    def _example(self, i, split):
        a, b = i % 7, 3 + i % 5
        return {"question_id": f"{split}-{i}", "question": f"What is {a} + {b}?", "task": self.name,
                "prompt": f"What is {a} + {b}? Put the answer in \\boxed{{}}.", "answer": str(a + b),
                "metadata": {"a": a, "b": b}}

    def train(self, n, seed=0):
        return [self._example(seed * 1000 + i, "train") for i in range(n)]

    def heldout(self, n):
        return [self._example(i, "heldout") for i in range(n)]

    def score(self, completion, example):
        return float(f"\\boxed{{{example['metadata']['a'] + example['metadata']['b']}}}" in completion)


@pytest.fixture
def fake_grae_data(monkeypatch):
    import types

    made = []

    def get_task(name, **params):
        made.append((name, params))
        return FakeTask()

    monkeypatch.setitem(sys.modules, "grae.data", types.SimpleNamespace(get_task=get_task))
    monkeypatch.setitem(sys.modules, "grae.rewards", types.SimpleNamespace(
        verify_math=lambda completion, gold: float(f"\\boxed{{{gold}}}" in completion)))
    from grae.engines.verl import reward

    reward._task.cache_clear()
    yield made
    reward._task.cache_clear()


def test_export_writes_verls_rl_schema(tmp_path):
    import pyarrow.parquet as pq

    from grae.engines.verl.export import export_verl

    path = export_verl("toy_math", tmp_path / "d" / "train.parquet", n=5, seed=2, task_params={"level": 3}, task=FakeTask())
    rows = pq.read_table(path).to_pylist()
    assert len(rows) == 5
    row = rows[1]
    assert row["data_source"] == "grae/toy_math" and row["ability"] == "math"
    assert row["prompt"] == [{"role": "user", "content": "What is 6 + 4? Put the answer in \\boxed{}."}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "10"}
    info = row["extra_info"]
    assert (info["split"], info["index"], info["question_id"], info["task"]) == ("train", 1, "train-2001", "toy_math")
    assert json.loads(info["task_params"]) == {"level": 3}
    assert json.loads(info["grae_example"])["metadata"] == {"a": 6, "b": 4}
    with pytest.raises(ValueError, match="split"):
        export_verl("toy_math", tmp_path / "x.parquet", split="test", task=FakeTask())


def test_exported_file_loads_in_verls_rl_dataset(verl_api, tmp_path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from grae.engines.verl.export import export_verl

    path = export_verl("toy_math", tmp_path / "heldout.parquet", split="heldout", n=3, task=FakeTask())
    tok = type("Tok", (), {"pad_token_id": 0, "eos_token_id": 1, "padding_side": "left"})()
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 64, "filter_overlong_prompts": False,
                            "return_raw_chat": True, "cache_dir": str(tmp_path / "cache")})
    ds = RLHFDataset(str(path), tok, cfg)
    assert len(ds) == 3
    item = ds[2]
    assert item["raw_prompt"] == [{"role": "user", "content": "What is 2 + 5? Put the answer in \\boxed{}."}]
    assert item["index"] == 2 and item["reward_model"]["ground_truth"] == "7" and item["data_source"] == "grae/toy_math"


def test_reward_function_scores_with_the_task_verifier(verl_api, fake_grae_data, tmp_path):
    """verl loads it exactly as its reward manager does (pkg:// path + name) and calls it with keywords."""
    import pyarrow.parquet as pq
    from verl.utils.import_utils import load_extern_object

    from grae.engines.verl.export import export_verl

    compute_score = load_extern_object("pkg://grae.engines.verl.reward", "compute_score")
    exported = export_verl("toy_math", tmp_path / "t.parquet", n=2, task_params={"level": 3}, task=FakeTask())
    row = pq.read_table(exported).to_pylist()[0]
    call = dict(data_source=row["data_source"], ground_truth=row["reward_model"]["ground_truth"], extra_info=row["extra_info"])
    assert compute_score(solution_str="so \\boxed{3}", **call) == 1.0
    assert compute_score(solution_str="so \\boxed{4}", **call) == 0.0
    assert fake_grae_data == [("toy_math", {"level": 3})]  # the task was rebuilt with its parameters, once
    # rows from other verl datasets (no grae example): grae.rewards.verify_math on ground_truth
    assert compute_score(data_source="lighteval/MATH", solution_str="\\boxed{12}", ground_truth="12") == 1.0

    ngrpo = load_extern_object("pkg://grae.engines.verl.reward", "compute_score_ngrpo")
    right = [ngrpo(solution_str="\\boxed{3}", **call) for _ in range(4)]
    wrong = [ngrpo(solution_str="\\boxed{9}", **call) for _ in range(4)]
    assert all(r["score"] == 1.0 and r["acc"] == 1.0 for r in right)
    # verl's filter_groups drops a group iff np.std(metric) == 0: only the all-correct group
    metric = "grae_all_correct_filter"
    assert np.std([r[metric] for r in right]) == 0.0
    assert np.std([r[metric] for r in wrong]) > 0 and np.std([r[metric] for r in right[:3] + wrong[:1]]) > 0
    # and the mirror field: only the all-wrong group has zero std
    metric = "grae_all_wrong_filter"
    assert np.std([r[metric] for r in wrong]) == 0.0
    assert np.std([r[metric] for r in right]) > 0 and np.std([r[metric] for r in wrong[:3] + right[:1]]) > 0


def test_grae_data_export_command(fake_grae_data, tmp_path):
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from grae.cli import _mount, app

    _mount()
    out = tmp_path / "math_train.parquet"
    result = CliRunner().invoke(app, ["data", "export", "toy_math", "--format", "verl", str(out), "--n", "4",
                                      "--seed", "1", "--param", "level=3"])
    assert result.exit_code == 0, result.output
    assert "reward.custom_reward_function.path=pkg://grae.engines.verl.reward" in result.output
    assert pq.read_table(out).num_rows == 4 and fake_grae_data == [("toy_math", {"level": 3})]
    bad = CliRunner().invoke(app, ["data", "export", "toy_math", str(out), "--format", "jsonl"])
    assert bad.exit_code == 2


# -- verl's batch padding (v1 trainer) and the v1 advantage path ----------------------------------------------


def padded_with_verls_template(tlr, mask, uid, n_pad):
    """Append ``n_pad`` rows built by verl's own padding template (``padding_utils``, what the v1 trainer's
    ``_balance_batch`` appends): one shared ``pad…`` uid, reward 0, an all-zero response mask."""
    from verl.trainer.ppo.padding_utils import construct_minimal_padding_template

    source = {"responses": torch.zeros(T, dtype=torch.int64), "response_mask": mask[0].clone(), "uid": uid[0]}
    template, tag = construct_minimal_padding_template(source, {"seq_len": T}, eos_token_id=2)
    assert tag["is_padding"] and not template["response_mask"].any()
    row_mask = torch.zeros(T)
    row_mask[: template["response_mask"].numel()] = template["response_mask"].float()
    row_reward = torch.zeros(T)
    row_reward[: template["rm_scores"].numel()] = template["rm_scores"]
    pad_uid = np.array(["pad" + "0" * 32] * n_pad, dtype=object)  # verl: f"pad{uuid4().hex}", shared
    return (torch.cat([tlr, row_reward.expand(n_pad, T)]), torch.cat([mask, row_mask.expand(n_pad, T)]),
            np.concatenate([uid, pad_uid]))


def v1_advantages(name, tlr, mask, uid, grae_cfg=None):
    """Through the v1 trainer's advantage function (``compute_advantage_for_multi_trajectories``)."""
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data = DataProto.from_dict(tensors={"token_level_rewards": tlr.clone(), "response_mask": mask.clone()},
                               non_tensors={"uid": uid})
    keys = [f"{u}_0_{i}" for i, u in enumerate(uid)]
    config = OmegaConf.create({"adv_estimator": name, "grae": grae_cfg or {}})
    out = compute_advantage_for_multi_trajectories(data, keys, adv_estimator=name, config=config)
    return out.batch["advantages"]


@pytest.mark.parametrize("name", general_names())
def test_verls_padding_rows_never_enter_the_statistics(verl_api, name):
    """128 real rows + 64 rows of verl's padding, through the v1 advantage path: the real rows get exactly
    the advantages (and ω, ACR, state) of the 128 rows alone; the padding rows get 0."""
    from grae.engines.verl import advantage

    rewards, group_of = grouped(num_groups=32, size=4, seed=3)
    tlr, mask, uid = make_batch(rewards, group_of, seed=3)
    alone = v1_advantages(f"grae_{name}", tlr, mask, uid)
    metrics_alone = dict(advantage.LAST_METRICS)
    state_alone = next(iter(advantage.CACHE.values())).state_dict()
    advantage.reset()

    padded = v1_advantages(f"grae_{name}", *padded_with_verls_template(tlr, mask, uid, 64))
    assert_close_scaled(padded[:128], alone, rel=1e-6)
    assert (padded[128:] == 0).all()
    for key in ["omega", "acr", "n_samples", "frac_dropped", "n_missing_rewards", "adv_pos_mass"]:
        # tol: float64 means, fractions and counts of 128 rows (rewards in [0, 1], |A| ≤ 2): rounding ≤ 1e-13
        assert advantage.LAST_METRICS[key] == pytest.approx(metrics_alone[key], abs=1e-9), key
    assert advantage.LAST_METRICS["verl/padding_rows"] == 64
    assert next(iter(advantage.CACHE.values())).state_dict() == state_alone


# -- the window between verl's tracker file and on_save --------------------------------------------------------


def test_a_crash_between_verls_tracker_and_on_save_resumes_from_the_snapshot(verl_api, tmp_path):
    """verl writes latest_checkpointed_iteration.txt, then calls on_save; dying in between would leave a
    checkpoint without estimator state, but the per-step snapshot (written at the advantage call) fills it."""
    from grae.engines.verl import advantage
    from grae.engines.verl.checkpoint import GraeCheckpointCallback

    root = _trainer_config(tmp_path)
    uninterrupted = _steps_at(verl_api, root, range(5))
    advantage.reset()

    GraeCheckpointCallback(config=root)
    _steps_at(verl_api, root, range(3))
    folder = tmp_path / "ckpt" / "global_step_3"  # verl's save of step 3, cut off before on_save
    folder.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("3")
    assert not (folder / "grae_estimator_state.json").exists()
    snapshots = sorted(p.name for p in (tmp_path / "ckpt" / "grae_estimator_state").iterdir())
    assert snapshots == ["global_step_1.json", "global_step_2.json", "global_step_3.json"]

    advantage.reset()  # a new driver process
    GraeCheckpointCallback(config=root)
    resumed = _steps_at(verl_api, root, range(3, 5))
    for a, b in zip(resumed, uninterrupted[3:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _steps_at(verl_api, root, seeds):
    """:func:`_steps` with verl's global step set as the v1 trainer does (SkipManager.set_step, from 1)."""
    from verl.utils.skip import SkipManager

    outs = []
    for s in seeds:
        SkipManager.set_step(s + 1)
        outs += _steps(verl_api, root, [s])
    return outs


def test_verl_refuses_an_estimator_needing_context_in_one_line():
    """verl passes an estimator no log-probs, answers or prompt keys: grae_unlikeliness fails at config check."""
    from grae.engines.verl.advantage import read_options

    with pytest.raises(ValueError, match=r"^estimator: 'unlikeliness' requires context logprob_mean, which verl"):
        read_options("unlikeliness", None)
    with pytest.raises(ValueError, match=r"^estimator: 'outcome_explore' requires context answer_id, prompt_key, which verl"):
        read_options("outcome_explore", None)
    assert read_options("passk", {"grae": {"k": 2}})["params"] == {"k": 2}

"""The whole loop with the real LeRobot: push expert demos collected with forge_gpu, exported to LeRobot, a policy
trained with ``lerobot-train`` (``--recipe``: ACT or diffusion, the settings of :data:`RECIPES`), and the trained
policy scored by forge_gpu's evaluation (``lerobot:OUTDIR``) over 200 keyed episodes of seed 2.

Run it with an interpreter that has LeRobot for training (``pip install "lerobot[dataset,training]==0.6.1"``, and
``lerobot[diffusion]`` for the diffusion recipe: Python >= 3.12, torch < 2.12) and forge_gpu; ``lerobot-train`` is
taken from beside that interpreter.

LEROBOT_VENV/bin/python bench/lerobot_loop.py                       # 200 demos, ACT 10,000 steps on the CPU
LEROBOT_VENV/bin/python bench/lerobot_loop.py --recipe diffusion    # the small diffusion policy, 6,000 steps
LEROBOT_VENV/bin/python bench/lerobot_loop.py --smoke               # tiny sizes: every stage runs, every figure
LEROBOT_VENV/bin/python bench/lerobot_loop.py --obs rgb --steps 3000  # from the front camera: ACT, ~34 min a core

``--obs state`` (the default; rendering off): the policy sees ``observation.state`` (proprio) and
``observation.environment_state`` (the push task's declared fields: cube pose, cube velocity, goal position).
``--obs rgb``: the demos and the evaluation render push's front camera (64 px) and the export leaves the environment
state out (``export_lerobot(..., environment_state=[])``), so the policy sees ``observation.images.rgb`` and
``observation.state`` alone; its ResNet-18 backbone starts from random weights (``pretrained_backbone_weights=null``:
the ImageNet weights are a download). Only the expert's successful episodes are
kept as demos. Figures: the demos (episodes kept of those collected, frames), each stage's seconds, the training
(steps, batch, final loss) and the evaluation's success rate with its 95% Wilson interval, return and length, and
which of forge_gpu's policy paths ran it (``chunk``: ``predict_action_chunk`` and forge_gpu's executor, each env's
first ``n_action_steps`` actions open loop; ``select_action``: LeRobot's queue, reset for every env when any env
starts an episode). Written to ``lerobot_loop.json`` (``lerobot_loop-diffusion.json`` for that recipe;
``-rgb`` after either from the camera).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine, save, table

SIZES = {
    "full": {"demos": 200, "collect_envs": 50, "batch": 64, "episodes": 200, "eval_envs": 50},
    "smoke": {"demos": 8, "collect_envs": 8, "steps": 4, "batch": 4, "episodes": 8, "eval_envs": 4},
}
RECIPES = {
    # a small ACT (122k parameters, no VAE): a chunk of 20 trained, its first 4 run open loop; LeRobot's constant
    # learning rate raised to 5e-4
    "act": {
        "steps": 10000,
        "policy.type": "act",
        "policy.chunk_size": 20,
        "policy.n_action_steps": 4,
        "policy.dim_model": 64,
        "policy.dim_feedforward": 256,
        "policy.n_heads": 4,
        "policy.n_encoder_layers": 1,
        "policy.n_decoder_layers": 1,
        "policy.use_vae": "false",
        "policy.optimizer_lr": 5e-4,
    },
    # a small diffusion policy (4.6M parameters): 2 observation steps, 16 actions denoised in 10 DDIM steps, the
    # first 4 run open loop; LeRobot's own optimizer and cosine schedule
    "diffusion": {
        "steps": 6000,
        "policy.type": "diffusion",
        "policy.n_obs_steps": 2,
        "policy.horizon": 16,
        "policy.n_action_steps": 4,
        "policy.drop_n_last_frames": 7,
        "policy.down_dims": "[64,128,256]",
        "policy.noise_scheduler_type": "DDIM",
        "policy.num_inference_steps": 10,
    },
}
"""``--recipe``: the training steps and ``lerobot-train``'s policy settings (docs/evaluation.md "Train with
LeRobot" gives each one's figures)."""
FROM_PIXELS = {"policy.pretrained_backbone_weights": "null"}
"""``--obs rgb``: what the recipe adds: the vision backbone from random weights (no download)."""


def collect_demos(work: Path, size: dict, device: str, overrides: dict) -> tuple[Path, dict]:
    """Push expert episodes (rendering as ``overrides`` say); the successful ones selected into their own run."""
    import forge_gpu
    from forge_gpu.curation import select_run
    from forge_gpu.reading import open_run

    env = forge_gpu.sim.make("push", num_envs=size["collect_envs"], device=device, seed=1, **overrides)
    expert = forge_gpu.sim.load_policy("expert", env)
    start = time.perf_counter()
    forge_gpu.recording.collect(env, expert, str(work / "expert"), episodes=size["demos"])
    seconds = time.perf_counter() - start
    picked = select_run(work / "expert", work / "demos", "success")
    run = open_run(work / "demos")
    frames = sum(run.ids(k)[2] for k in range(len(run)))
    return work / "demos", {
        "collected": picked["of"],
        "demos": picked["episodes"],
        "frames": int(frames),
        "collect_s": seconds,
    }


def train(dataset: Path, out: Path, size: dict, recipe: dict) -> dict:
    """``lerobot-train`` of ``recipe``'s policy on the CPU, no hub, no wandb; its last logged loss."""
    binary = Path(sys.executable).parent / "lerobot-train"
    if not binary.exists():
        raise SystemExit(f"{binary} is missing: run this script with an interpreter that has LeRobot installed")
    args = [
        str(binary),
        f"--dataset.repo_id=forge_gpu/{dataset.name}",
        f"--dataset.root={dataset}",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        *(f"--{k}={v}" for k, v in recipe.items() if k != "steps"),
        f"--output_dir={out}",
        f"--steps={size['steps']}",
        f"--batch_size={size['batch']}",
        f"--save_freq={size['steps']}",
        f"--log_freq={max(1, size['steps'] // 20)}",
        "--num_workers=0",
        "--wandb.enable=false",
        "--seed=1",
    ]
    environ = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")
    start = time.perf_counter()
    done = subprocess.run(args, env=environ, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = done.stdout + done.stderr
    (out.parent / "lerobot-train.log").write_text(log)
    if done.returncode != 0:
        tail = "\n".join(log.splitlines()[-30:])
        raise SystemExit(f"lerobot-train failed ({done.returncode}); its last lines:\n{tail}")
    losses = [float(x) for x in re.findall(r"\bloss:([0-9.eE+-]+)", log)]
    loss = losses[-1] if losses else None
    return {"train_s": seconds, "steps": size["steps"], "batch": size["batch"], "final_loss": loss}


def evaluate(out: Path, size: dict, device: str, overrides: dict) -> dict:
    """forge_gpu's evaluation of the trained policy: ``lerobot:OUT`` through load_policy (the chunk path), or where
    load_policy does not take ``lerobot:`` names, the adapter's select_action path in a TorchPolicy."""
    import forge_gpu
    from forge_gpu._src.sim.lerobot_policy import lerobot_policy
    from forge_gpu._src.sim.policies import TorchPolicy

    env = forge_gpu.sim.make("push", num_envs=size["eval_envs"], device=device, seed=2, **overrides)
    try:
        policy = forge_gpu.sim.load_policy(f"lerobot:{out}", env)
        path = getattr(getattr(policy, "fn", None), "mode", "chunk")
    except ValueError as e:
        if "unknown policy" not in str(e):
            raise
        fn = lerobot_policy(out, env, mode="select_action")
        policy, path = TorchPolicy(env, lambda spec, device: fn, name=f"lerobot:{out}"), fn.mode
    start = time.perf_counter()
    result = forge_gpu.recording.evaluate(env, policy, episodes=size["episodes"])
    metrics = result.metrics()
    rate = metrics["success_at_end"]
    return {
        "path": path,
        "eval_envs": size["eval_envs"],
        "episodes": metrics["n_episodes"],
        "success_rate": rate["rate"],
        "success_low": rate["low"],
        "success_high": rate["high"],
        "return": metrics["return"]["mean"],
        "length": metrics["length"]["mean"],
        "eval_s": time.perf_counter() - start,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: every stage runs in seconds")
    parser.add_argument("--device", default="cpu", help="forge_gpu's Warp device (collection and evaluation)")
    parser.add_argument("--recipe", choices=list(RECIPES), default="act", help="the policy trained (RECIPES)")
    parser.add_argument(
        "--obs", choices=["state", "rgb"], default="state", help="what the policy sees: the state, or the camera"
    )
    parser.add_argument("--steps", type=int, help="training steps (default: the recipe's; smoke 4)")
    parser.add_argument("--batch", type=int, help="training batch (default 64)")
    parser.add_argument("--max-steps", type=int, default=200, help="push's episode limit (the config's: 200)")
    parser.add_argument("--work", help="keep the runs, the export and the trained policy here (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results)")
    args = parser.parse_args(argv)
    size = dict(SIZES["smoke" if args.smoke else "full"])
    recipe = RECIPES[args.recipe] | (FROM_PIXELS if args.obs == "rgb" else {})
    overrides = {"params.render": args.obs == "rgb", "max_steps": args.max_steps}  # collection and evaluation
    size["steps"] = args.steps or size.get("steps", recipe["steps"])
    size["batch"] = args.batch or size["batch"]
    from forge_gpu.export import export_lerobot

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lerobot_loop_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        demos, row = collect_demos(work, size, args.device, overrides)
        print(f"demos: {row['demos']} successful of {row['collected']} expert episodes, {row['frames']} frames")
        start = time.perf_counter()
        report = export_lerobot(demos, work / "lerobot", environment_state=[] if args.obs == "rgb" else None)
        row["export_s"] = time.perf_counter() - start
        row["environment_state"] = ",".join(report["environment_state"])
        row |= train(work / "lerobot", work / "policy", size, recipe)
        trained = f"{row['steps']} steps of {row['batch']} in {row['train_s']:.0f} s"
        print(f"{args.recipe}: {trained}, loss {row['final_loss']}")
        row |= evaluate(work / "policy", size, args.device, overrides)
        print(
            f"{args.recipe} on push ({row['path']} path): success {100 * row['success_rate']:.1f}% "
            f"[95% CI {100 * row['success_low']:.1f}, {100 * row['success_high']:.1f}] over {row['episodes']} episodes"
        )
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    columns = ["demos", "frames", "steps", "batch", "final_loss", "train_s", "path", "episodes", "success_rate"]
    columns += ["success_low", "success_high", "return", "length", "eval_s"]
    markdown = table([row], columns)
    print(markdown)
    payload = {"sizes": size, "recipe": args.recipe, "obs": args.obs, "settings": recipe, "rows": [row]}
    payload["machine"] = machine()
    name = "lerobot_loop" + ("" if args.recipe == "act" else f"-{args.recipe}") + ("-rgb" if args.obs == "rgb" else "")
    path = save(name, payload, markdown, args.out)
    print(f"wrote {path}")
    print(json.dumps({k: row[k] for k in ("success_rate", "success_low", "success_high")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

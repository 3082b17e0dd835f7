"""The closed loop: behaviour cloning against the number of expert demos, then DAgger from the 50-demo policy; on push
unless ``--task`` names another task with an expert (an id or a task file, e.g. configs/lift.toml).

python bench/imitation.py                  # push: N = 25, 50, 100, 200, 400 demos; 3 DAgger rounds; 500 episodes
python bench/imitation.py --smoke          # tiny sizes: seconds of training, every figure produced
python bench/imitation.py --demos 50 200 --dagger-rounds 0 --execution open_loop
python bench/imitation.py --task configs/lift.toml --demos 25 50 100 200 --episodes 200 --dagger-rounds 0 \
    --execution open_loop --no-matched-bc   # behaviour cloning on lift (its expert keeps state: no DAgger)
python bench/imitation.py --obs rgb --cameras front --image-size 64 --crop 64 --aux 1 --feed-located --demos 200 \
    --dagger-rounds 0 --execution open_loop --batch 64 --episodes 200 --eval-envs 100 \
    --name imitation-pixels-push   # from the front camera and the proprio (docs/performance.md "Learning from pixels")

Demos: one recorded evaluation of the expert (``forge_gpu.recording.evaluate(..., record=...)``) over the largest N
episodes, one world each (seed ``--demo-seed``), so episode j is world j's first episode; the first N demos are the
worlds ``env < N`` (``forge_gpu.curation.select_run``), the same episodes at every N. Rendering is off (the param
``render`` set false where the task has one): the policy reads every float32 vector field of the task's observation
but ``reward_terms`` and the expert's labels (:func:`policy_fields`; no images), in the spec's order: on push proprio,
cube_pose, cube_velocity and goal_position; on lift proprio (joint positions and velocities, the tcp's position) and
cube_pose. Results go to ``imitation.json`` on push, ``imitation-<task>.json`` on another task (``--name``).

Behaviour cloning: an MLP (``--hidden`` units, two layers) from ``--history`` frames of the state fields to a
chunk of ``--horizon`` actions, trained on ``forge_gpu.reading.WindowMapDataset(pad=True)`` windows (padded actions
masked out of the loss), inputs and targets normalized with ``forge_gpu.reading.normalization`` of the run, for a
fixed budget of ``--train-steps`` Adam steps whatever N (on ``--threads`` torch threads). The head: ``--head mse``
(the default) outputs the chunk, fit by mean squared error; ``--head gmm`` a mixture of ``--mixtures`` Gaussians with
diagonal covariances over the whole flattened chunk, fit by negative log likelihood (the padded steps out of every
component's density; its ``final_loss`` is that likelihood per real value, not comparable with the squared error),
executed as the mean of the most probable component, so that the expert's several modes at one state are not averaged
(``--log-std-min``: the floor of the components' log standard deviations in training).

From pixels (``--obs rgb`` or ``rgbd``, ``--cameras`` by name, ``front`` the task's own camera): the demos and the
evaluations render the cameras at ``--image-size`` px (the param ``render`` on, ``image_size`` set) and the policy reads
each camera's frames and the ``proprio`` field alone, no object or goal state. Per camera a small convolutional
encoder (two stride-2 3x3 convolutions, a third, a 1x1 to 32 keypoint maps and a spatial softmax: each map's expected
image coordinates), shared over the history's frames, its keypoints beside the normalized proprio into the same MLP
and chunk; pixels normalized per channel by the run's statistics; each training window randomly cropped to 7/8 of
its side (the same crop in each of its frames; ``--crop`` sets the side), the centre crop at evaluation. ``--aux W``
adds a training-only loss (weight ``W``): a head on each frame's keypoints alone regresses the task's object and goal
positions (the first 3 values of each ``environment_state`` field, normalized), so the encoder must locate them; the
row reports how far it located each (``located_<field>_m``), and the saved policy leaves the head out;
with ``--feed-located`` its positions (detached) go into the policy's MLP too, and the policy keeps the head. Trained by
squared error on ``WindowMapDataset(pad=True)`` batches drawn with replacement by a ``BatchSampler`` and gathered
in ``--workers`` DataLoader workers: ``--loader mapped`` (the default) over the memory-mapped runs, each batch's frames
decoded as it is gathered; ``--loader loaded``, every frame decoded once into each worker's memory as it opens the
runs (about 25 KB a frame of two 64 px rgb cameras). Each row reports the loader: ``wait_share`` (the share of the
training's time after the first batch spent waiting for the next batch), ``windows_per_s`` trained and
``first_batch_s`` (the workers' start and their first batch). DAgger from pixels trains on the rollouts'
chunks of expert labels (``--label-steps chunk``), the frames of every run decoded by the same loader. ``--shift NAME
KEY=VALUE ...`` scores every policy again in envs whose config overrides those of the run (held-out colours, the
camera beyond its training range), as ``NAME_success``: push's generalization table is docs/performance.md "How far it
generalizes" (its palette split in two, ``--set variant=visual`` for its visual randomization).

Evaluation: ``forge_gpu.recording.evaluate`` over ``--episodes`` keyed episodes of its own seed (``--eval-seed``),
the chunk executed open loop ``--steps-per-chunk`` steps per env and, with ``--execution ensemble``, with ACT's
temporal ensembling.

DAgger: from the 50-demo policy (``--dagger-from``), each round records ``--dagger-episodes`` episodes that the
current learner drives, each frame labelled with the expert's action for its observation (``expert_action``, a
seed of its own per round), adds them to the data (the expert demos' target is their action, the rollouts' the
expert's labels; with ``--label-steps first`` a rollout window supervises its first label alone) and retrains from
scratch with the same budget. With ``--label-steps expert`` the rollouts are recorded with their state instead of
labels, and a rollout window's target is the expert's own chunk: its frame restored in a world of a second env (a
batch of ``--relabel-envs`` frames at once) and the expert run ``--horizon`` steps from there
(``forge_gpu._src.sim.relabel.expert_chunks``), for the frames ``t % --label-every == 0`` (and ``t <
--label-until``); ``--segment-windows`` adds the windows along each rolled-forward chunk; each labelled frame counts
``--horizon`` labelled steps (every expert call). With ``--label-steps takeover`` (HG-DAgger's interventions) the
expert takes over a learner's episode for ``--takeover-steps`` steps wherever the learner's actions depart from its
labels (an averaged gap above ``--takeover-gap``, :class:`Takeover`), and only the frames it drove are labelled
steps and targets, each window's target the actions it went on to execute (:func:`takeover_windows`); the gate reads
the expert's label at every frame, which costs nothing for a scripted expert (a person would watch).
``--rollout-share`` draws that share of each training batch from the rollouts' windows. DAgger needs an expert whose
action is a function of the frame alone: a task whose expert keeps per-world state between calls (lift's
``pick_expert``: its phase, timer and joint targets) is refused with ``--dagger-rounds`` above 0, as a restored frame
restarts such an expert's machine and a learner's frames drive it through phases it did not reach
(:func:`expert_memory`). Each round is set beside behaviour cloning on the fewest first demos holding at least as
many expert-labelled steps (a labelled step: a transition whose action, or expert label, is a training target).

Each policy is saved under ``--work`` (the row's ``checkpoint``, with the fields it reads); from bench/, ``forge-gpu
evaluate push --policy imitation:make_policy --policy-arg checkpoint=PATH --chunk-steps 4`` scores it again (on lift:
``forge-gpu evaluate ../configs/lift.toml --set params.render=false ...``; a policy from pixels with the cameras
rendering at its size: ``forge-gpu evaluate push --set params.image_size=64 --policy imitation:make_policy ...``).

Figures per row: the number of demos and rollouts, the expert-labelled steps, training seconds and final loss,
success (once and at the end, with Wilson's 95% interval) per execution.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from common import RESULTS, add_set_option, machine, parse_override, save, table

FIELDS = ("proprio", "cube_pose", "cube_velocity", "goal_position")
"""push's state observation fields: what a checkpoint without its ``fields`` reads."""
LABEL = "expert_action"
"""The observation field a labelled collection records the expert's action in."""
NOT_READ = ("reward_terms",)
"""Float32 vector fields of an observation that the policy does not read (the reward's terms)."""
TAKEOVER_WEIGHT = 0.2
"""``--label-steps takeover``: the newest gap's weight in the averaged gap that starts a takeover."""


def policy_fields(spec: dict) -> tuple[str, ...]:
    """The observation fields the policy reads: every float32 field of ``spec['observation']`` with one dimension
    (no scalars such as ``time``, no images), but :data:`NOT_READ` and the labels (``spec['labels']``), in the
    spec's order."""
    labels = spec.get("labels") or {}
    return tuple(
        name
        for name, field in spec["observation"].items()
        if field["dtype"] == "float32" and len(field["shape"]) == 1 and name not in NOT_READ and name not in labels
    )


def expert_memory(env) -> list[str]:
    """The per-world state the task's expert keeps between calls: the attributes of a fresh expert that are arrays
    with a row per world (pick_expert's ``phase``); empty for an expert whose action is a function of the
    observation alone (push's)."""
    expert = env.task.expert(env.world)
    state = vars(expert) if hasattr(expert, "__dict__") else {}
    return sorted(k for k, v in state.items() if getattr(v, "shape", ())[:1] == (env.num_envs,))


# --- the policy --------------------------------------------------------------------------------------------------


LOG_STD = (-7.0, 2.0)
"""The bounds of the mixture head's log standard deviations (of normalized actions): a floor keeps the likelihood
finite."""


def check_log_std_min(parser, flag: str, value: float) -> None:
    """``parser.error`` (one line) for a mixture floor ``value`` (given as ``flag``) outside :data:`LOG_STD`."""
    if not LOG_STD[0] <= value < LOG_STD[1]:
        parser.error(f"{flag} {value}: expected a value in [{LOG_STD[0]}, {LOG_STD[1]})")


def head_outputs(head: str, chunk: int, mixtures: int) -> int:
    """The MLP's outputs for a chunk of ``chunk`` flat action values: the chunk itself (``mse``), or per component
    of the mixture a mean, a log standard deviation per value and a logit (``gmm``)."""
    return chunk if head == "mse" else mixtures * (2 * chunk + 1)


def split_mixture(out, mixtures: int, chunk: int, log_std_min: float = LOG_STD[0]):
    """The mixture head's output ``[W, K * (2 * chunk + 1)]`` as ``(logits [W, K], mean [W, K, chunk], log_std [W,
    K, chunk])``, the log standard deviations bounded to [``log_std_min``, :data:`LOG_STD`'s upper bound]."""
    logits = out[:, :mixtures]
    rest = out[:, mixtures:].view(-1, mixtures, 2, chunk)
    return logits, rest[:, :, 0], rest[:, :, 1].clamp(log_std_min, LOG_STD[1])


def mixture_nll(out, y, mask, mixtures: int, log_std_min: float = LOG_STD[0]):
    """The mixture head's loss: the negative log likelihood of each window's chunk ``y`` [W, H, A] under its mixture
    of ``mixtures`` diagonal Gaussians over the whole flattened chunk, the values where ``mask`` [W, H] is false (the
    padded steps) left out of every component's density; per real value, averaged over the windows."""
    import math

    import torch

    windows, horizon, actions = y.shape
    logits, mean, log_std = split_mixture(out, mixtures, horizon * actions, log_std_min)
    keep = mask.unsqueeze(-1).expand(-1, -1, actions).reshape(windows, 1, -1).float()
    z = (y.reshape(windows, 1, -1) - mean) * torch.exp(-log_std)
    per_value = 0.5 * z.square() + log_std + 0.5 * math.log(2 * math.pi)
    log_component = -(per_value * keep).sum(-1) + torch.log_softmax(logits, -1)  # [W, K]
    nll = -torch.logsumexp(log_component, -1)
    return nll.sum() / keep.sum().clamp(min=1)


def build_model(inputs: int, outputs: int, hidden: int):
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, outputs),
    )


class Chunker:
    """The trained MLP as a torch policy: ``fn(observation) -> [N, horizon, A]`` actions from ``history`` frames of
    the checkpoint's ``fields`` (``[N, history, ...]`` each, oldest first), normalized as in training; with the
    mixture head, the mean of the most probable component. ``history`` and ``chunk`` are the attributes forge_gpu's
    torch policies read."""

    def __init__(self, checkpoint: dict, device):
        import torch

        self.history = checkpoint["history"]
        self.fields = tuple(checkpoint.get("fields", FIELDS))
        self.chunk = checkpoint["horizon"]
        self.actions = checkpoint["actions"]
        self.head, self.mixtures = checkpoint.get("head", "mse"), checkpoint.get("mixtures", 1)
        outputs = head_outputs(self.head, self.chunk * self.actions, self.mixtures)
        self.model = build_model(checkpoint["inputs"], outputs, checkpoint["hidden"]).to(device)
        self.model.load_state_dict(checkpoint["model"])
        self.model.eval()
        as_tensor = lambda key: torch.as_tensor(checkpoint[key], dtype=torch.float32, device=device)  # noqa: E731
        self.center, self.scale = as_tensor("center"), as_tensor("scale")
        self.action_center, self.action_scale = as_tensor("action_center"), as_tensor("action_scale")

    def __call__(self, observation: dict):
        import torch

        frames = torch.cat([observation[f].reshape(*observation[f].shape[:2], -1) for f in self.fields], dim=-1)
        x = ((frames - self.center) / self.scale).flatten(1)
        out = self.model(x)
        if self.head == "gmm":  # deterministic: the mean of each window's most probable component
            logits, mean, _ = split_mixture(out, self.mixtures, self.chunk * self.actions)
            out = mean[torch.arange(len(out), device=out.device), logits.argmax(-1)]
        out = out.view(-1, self.chunk, self.actions)
        return out * self.action_scale + self.action_center


def make_policy(spec, device, checkpoint: str):
    """The policy factory (``--policy imitation:make_policy --policy-arg checkpoint=PATH``, run from bench/): the
    :class:`Chunker` or :class:`ImageChunker` that ``checkpoint`` (a file this script saved) holds."""
    import torch

    return chunker(torch.load(checkpoint, map_location=device, weights_only=False), device)


def chunker(checkpoint: dict, device):
    """The torch policy a checkpoint holds: an :class:`ImageChunker` for a visuomotor one, else a :class:`Chunker`."""
    if checkpoint.get("kind") == "pixels":
        return ImageChunker(checkpoint, device)
    return Chunker(checkpoint, device)


# --- the image policy --------------------------------------------------------------------------------------------


OBS_KINDS = ("state", "rgb", "rgbd")
"""``--obs``: the task's state vectors, or each camera's RGB (``rgb``), or its RGB and depth (``rgbd``) beside the
proprio."""
PROPRIO = "proprio"
"""The one state field an image policy reads: the robot's own joints and end effector, no object or goal state."""
KEYPOINTS = 32
"""Each camera encoder's keypoints (the spatial softmax's channels): 2 coordinates each."""
AUX_HIDDEN = 128
"""``--aux``: the hidden width of the training-only head that reads the object and goal positions from the keypoints."""


def image_fields(cameras: list[str], obs: str) -> list[str]:
    """The observation fields an image policy reads for ``cameras`` (names, ``front`` the task's unnamed camera): each
    camera's rgb field, then (``rgbd``) its depth field."""
    from forge_gpu._src.core.cameras import camera_fields

    fields = []
    for name in cameras:
        rgb, depth = camera_fields(name)
        fields += [rgb, depth] if obs == "rgbd" else [rgb]
    return fields


def check_cameras(spec: dict, cameras: list[str], obs: str, where: str) -> None:
    """ValueError (one line) naming a camera that ``spec``'s observation does not render (with the ones it does), or
    the missing depth field of ``rgbd``, or a task without the :data:`PROPRIO` field."""
    from forge_gpu._src.core.cameras import cameras as cameras_of

    layout = {k: (tuple(v["shape"]), v["dtype"]) for k, v in spec["observation"].items()}
    rendered = cameras_of(layout)
    for name in cameras:
        if name not in rendered:
            have = ", ".join(rendered) or "none (rendering off?)"
            raise ValueError(f"--cameras {name!r}: {where} renders no camera of that name; its cameras: {have}")
        if obs == "rgbd" and rendered[name]["depth"] is None:
            raise ValueError(f"--obs rgbd: camera {name!r} of {where} records no depth; use --obs rgb")
    if PROPRIO not in spec["observation"]:
        raise ValueError(f"--obs {obs}: {where} has no {PROPRIO!r} observation field for the image policy to read")


def crop_size(size: int) -> int:
    """The random crop's side for ``size`` px frames: 7/8 of it (robomimic and Diffusion Policy crop about 90%)."""
    return size - size // 8


def pixel_input(frames: list, center, scale, crop: int, offsets=None):
    """One camera's frames as the encoder's input ``[B, T, C, crop, crop]``: ``frames`` its fields' tensors (rgb
    ``[B, T, H, W, 3]`` uint8, then depth ``[B, T, H, W]`` float32 where read), normalized per channel by ``center``
    and ``scale`` (``[C]``), cropped at ``offsets`` (``(rows, cols)``, ``[B]`` each: one crop per window, the same in
    each of its frames) or, without them, at the centre (evaluation)."""
    import torch

    channels = [f.float() if f.dim() == 5 else f.float().unsqueeze(-1) for f in frames]
    x = (torch.cat(channels, -1) - center) / scale  # [B, T, H, W, C]
    batch, history, height, width, depth = x.shape
    if offsets is None:
        top, left = (height - crop) // 2, (width - crop) // 2
        x = x[:, :, top : top + crop, left : left + crop]
    else:  # a gather per window: rows and columns indexed from each window's offsets
        steps = torch.arange(crop, device=x.device)
        rows, cols = offsets[0][:, None] + steps, offsets[1][:, None] + steps
        x = x.permute(0, 2, 3, 1, 4).reshape(batch, height, width, history * depth)
        index = torch.arange(batch, device=x.device)[:, None, None]
        x = (
            x[index, rows[:, :, None], cols[:, None, :]]
            .reshape(batch, crop, crop, history, depth)
            .permute(0, 3, 1, 2, 4)
        )
    return x.permute(0, 1, 4, 2, 3).contiguous()


def build_visual_model(
    cameras: int,
    channels: int,
    proprio: int,
    history: int,
    outputs: int,
    hidden: int,
    aux: int = 0,
    feed: bool = False,
):
    """The visuomotor network: per camera a convolutional encoder (two stride-2 3x3 convolutions, a third, a 1x1 to
    :data:`KEYPOINTS` maps and a spatial softmax: each map's expected image coordinates in [-1, 1]) applied to every
    frame of the history, its keypoints beside the normalized proprio of every frame, into the MLP of the state
    policy (two ``hidden`` layers) that outputs the flat action chunk. With ``aux`` > 0, a training-only head
    (``aux.*``, an MLP of :data:`AUX_HIDDEN`) reads each frame's keypoints alone and outputs ``aux`` values: the
    object and goal positions the auxiliary loss asks the encoder to locate (``forward(..., aux=True)``). With
    ``feed``, the head is part of the policy: its positions of every frame go into the MLP beside the keypoints and
    the proprio, detached (the auxiliary loss alone trains the head; the actions' loss trains the encoder through
    the keypoints, as without it)."""
    import torch

    class SpatialSoftmax(torch.nn.Module):
        def forward(self, maps):  # [B, K, H, W] -> [B, 2K]: the expected (x, y) of each map's softmax
            batch, keys, height, width = maps.shape
            weights = torch.softmax(maps.flatten(2), -1).view(batch, keys, height, width)
            xs = torch.linspace(-1.0, 1.0, width, device=maps.device)
            ys = torch.linspace(-1.0, 1.0, height, device=maps.device)
            return torch.cat([(weights.sum(2) * xs).sum(-1), (weights.sum(3) * ys).sum(-1)], -1)

    def encoder():
        conv = torch.nn.Conv2d
        return torch.nn.Sequential(
            conv(channels, 16, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            conv(16, 32, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            conv(32, 32, 3, padding=1),
            torch.nn.ReLU(),
            conv(32, KEYPOINTS, 1),
            SpatialSoftmax(),
        )

    class Visuomotor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoders = torch.nn.ModuleList(encoder() for _ in range(cameras))
            located = aux if feed else 0
            self.head = build_model(history * (proprio + 2 * KEYPOINTS * cameras + located), outputs, hidden)
            if aux:
                self.aux = torch.nn.Sequential(
                    torch.nn.Linear(2 * KEYPOINTS * cameras, AUX_HIDDEN),
                    torch.nn.ReLU(),
                    torch.nn.Linear(AUX_HIDDEN, aux),
                )

        def forward(
            self, pixels: list, state, aux: bool = False
        ):  # pixels: per camera [B, T, C, h, w]; state: [B, T, D]
            batch, history = state.shape[:2]
            keys = [enc(p.flatten(0, 1)).view(batch, history, -1) for enc, p in zip(self.encoders, pixels, strict=True)]
            guess = self.aux(torch.cat(keys, -1)) if aux or feed else None  # [B, T, aux]
            fed = [guess.detach()] if feed else []
            out = self.head(torch.cat([*keys, *fed, state], -1).flatten(1))
            return (out, guess) if aux else out

    return Visuomotor()


class ImageChunker:
    """The trained visuomotor network as a torch policy: ``fn(observation) -> [N, horizon, A]`` actions from
    ``history`` frames of the checkpoint's cameras (centre-cropped as in training's random crops) and proprio,
    normalized as in training. ``history`` and ``chunk`` are the attributes forge_gpu's torch policies read; the env
    must render the checkpoint's cameras at its image size (``--set params.image_size=...``)."""

    def __init__(self, checkpoint: dict, device):
        import torch

        self.history, self.chunk, self.actions = checkpoint["history"], checkpoint["horizon"], checkpoint["actions"]
        self.fields, self.cameras = tuple(checkpoint["fields"]), checkpoint["cameras"]
        self.crop = checkpoint["crop"]
        outputs = self.chunk * self.actions
        channels = len(checkpoint["pixel_center"][0])
        located = checkpoint.get("located", 0)  # --feed-located: the head locating the object and goal, its width
        self.model = build_visual_model(
            len(self.cameras),
            channels,
            checkpoint["proprio"],
            self.history,
            outputs,
            checkpoint["hidden"],
            located,
            feed=located > 0,
        ).to(device)
        self.model.load_state_dict(checkpoint["model"])
        self.model.eval()
        as_tensor = lambda value: torch.as_tensor(value, dtype=torch.float32, device=device)  # noqa: E731
        self.center, self.scale = as_tensor(checkpoint["center"]), as_tensor(checkpoint["scale"])
        self.action_center, self.action_scale = (
            as_tensor(checkpoint["action_center"]),
            as_tensor(checkpoint["action_scale"]),
        )
        self.pixel_center = [as_tensor(c) for c in checkpoint["pixel_center"]]
        self.pixel_scale = [as_tensor(s) for s in checkpoint["pixel_scale"]]

    def frames(self, observation: dict, field: str):
        """``field``'s frames with a history axis (``[N, history, ...]``; a history of 1 has none in the env's
        views)."""
        value = observation[field]
        return value.unsqueeze(1) if self.history == 1 else value

    def __call__(self, observation: dict):
        import torch

        state = torch.cat(
            [self.frames(observation, f).reshape(len(observation[f]), self.history, -1) for f in self.fields], -1
        )
        pixels = [
            pixel_input([self.frames(observation, f) for f in fields], center, scale, self.crop)
            for fields, center, scale in zip(self.cameras.values(), self.pixel_center, self.pixel_scale, strict=True)
        ]
        out = self.model(pixels, (state.float() - self.center) / self.scale)
        return out.view(-1, self.chunk, self.actions) * self.action_scale + self.action_center


def pixel_normalization(run: str, fields: list[str]) -> tuple[list, list]:
    """Per channel centre and scale of one camera's ``fields`` (rgb, then depth where read) from ``run``'s
    statistics: the pixels' mean and standard deviation."""
    import forge_gpu

    norm = forge_gpu.reading.normalization(run, [f"obs/{f}" for f in fields])
    return norm.center.astype(np.float32).ravel(), norm.scale.astype(np.float32).ravel()


class RunWindows:
    """The windows of several runs, each with its own target (the demos' ``action``, the DAgger rollouts' expert
    labels), as one map-style dataset of batches: ``dataset[indices]`` gathers each run's share of ``indices`` (global,
    the runs' windows end to end) in one vectorized call and stacks them."""

    def __init__(self, datasets: list):
        self.datasets = datasets
        self.ends = np.cumsum([len(d) for d in datasets])

    def __len__(self) -> int:
        return int(self.ends[-1])

    def __getitem__(self, indices):
        import torch

        indices = np.asarray(indices, dtype=np.int64)
        parts, start = [], 0
        for dataset, end in zip(self.datasets, self.ends, strict=True):
            mine = indices[(indices >= start) & (indices < end)] - start
            if len(mine):
                parts.append(dataset.windows.batch(mine))
            start = end
        keys = [k for k in parts[0] if k != "instruction"]
        return {k: torch.from_numpy(np.ascontiguousarray(np.concatenate([p[k] for p in parts]))) for k in keys}


def train_pixels(runs: list[tuple[str, str]], norm_run: str, args, seed: int) -> tuple[dict, dict]:
    """The visuomotor network trained from scratch on the padded windows of ``runs`` (``(run, target)`` pairs: the
    demos with their ``action``, DAgger's rollouts with the expert's labels), normalized by ``norm_run``'s statistics,
    for ``args.train_steps`` Adam steps: batches of ``args.batch`` windows drawn with replacement by a
    ``BatchSampler`` over ``WindowMapDataset`` (mapped or loaded as ``args.loader`` says, in ``args.workers``
    DataLoader workers; several runs through :class:`RunWindows`), each window randomly cropped. Returns the
    checkpoint and its figures, the loader's among them: ``wait_share``, the share of the steps' time (after the
    first batch, which starts the workers: ``first_batch_s``) spent waiting for the next batch, and ``windows_per_s``
    trained."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    import forge_gpu

    torch.manual_seed(seed)
    cameras = {name: image_fields([name], args.obs) for name in args.cameras}
    keys = list(args.fields) + [f for fields in cameras.values() for f in fields]
    manifest = forge_gpu.reading.open_run(norm_run).manifest
    located = list(manifest["env_spec"].get("environment_state") or []) if args.aux > 0 else []
    if args.aux > 0 and not located:
        raise ValueError(f"--aux {args.aux}: {norm_run}'s task declares no environment_state fields to locate")
    keys += located
    datasets = [
        forge_gpu.reading.WindowMapDataset(
            run,
            history=args.history,
            horizon=args.horizon,
            pad=True,
            observation_keys=keys,
            target=target,
            mmap=args.loader == "mapped",
        )
        for run, target in runs
    ]
    dataset = datasets[0] if len(datasets) == 1 else RunWindows(datasets)
    run = norm_run
    norm = forge_gpu.reading.normalization(run, [f"obs/{f}" for f in args.fields])
    target = forge_gpu.reading.normalization(run, ["action"])
    pixels = [pixel_normalization(run, fields) for fields in cameras.values()]
    center, scale = torch.from_numpy(norm.center), torch.from_numpy(norm.scale)
    action_center, action_scale = torch.from_numpy(target.center), torch.from_numpy(target.scale)
    pixel_center = [torch.from_numpy(c) for c, _ in pixels]
    pixel_scale = [torch.from_numpy(s) for _, s in pixels]
    spec = forge_gpu.reading.open_run(run).manifest["env_spec"]["observation"]
    size = int(spec[next(iter(cameras.values()))[0]]["shape"][0])
    crop = crop_size(size) if args.crop is None else args.crop
    generator = torch.Generator().manual_seed(seed)
    draws = RandomSampler(dataset, replacement=True, num_samples=args.train_steps * args.batch, generator=generator)
    loader = DataLoader(
        dataset, sampler=BatchSampler(draws, args.batch, drop_last=True), batch_size=None, num_workers=args.workers
    )
    actions = len(action_center)
    outputs = args.horizon * actions
    if located:  # each environment-state field's first 3 values (a pose's or velocity's linear part, a point)
        places = forge_gpu.reading.normalization(norm_run, [f"obs/{f}" for f in located])
        sizes = [int(np.prod(spec[f]["shape"])) for f in located]
        pick = np.concatenate([np.arange(3) + start for start in np.cumsum([0, *sizes[:-1]])])
        place_center = torch.from_numpy(places.center[pick].astype(np.float32))
        place_scale = torch.from_numpy(places.scale[pick].astype(np.float32))
    model = build_visual_model(
        len(cameras),
        len(pixel_center[0]),
        len(center),
        args.history,
        outputs,
        args.hidden,
        3 * len(located),
        feed=args.feed_located,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.train_steps)
    losses, waited, aux_errors = [], 0.0, []
    began = time.perf_counter()
    batches = iter(loader)
    first_batch = 0.0
    for step in range(args.train_steps):
        asked = time.perf_counter()
        batch = next(batches)
        got = time.perf_counter()
        if step == 0:
            first_batch, steady = got - asked, got
        else:
            waited += got - asked
        count = len(batch["action"])
        state = torch.cat([batch[f"obs/{f}"].reshape(count, args.history, -1).float() for f in args.fields], -1)
        offsets = torch.randint(size - crop + 1, (2, count), generator=generator)
        inputs = [
            pixel_input([batch[f"obs/{f}"] for f in fields], c, s, crop, offsets)
            for fields, c, s in zip(cameras.values(), pixel_center, pixel_scale, strict=True)
        ]
        y = (batch["action"].float() - action_center) / action_scale
        mask = (~batch["action_is_pad"]).float()
        if located:
            out, guess = model(inputs, (state - center) / scale, aux=True)
            where = torch.cat(
                [batch[f"obs/{f}"].reshape(count, args.history, -1)[..., :3].float() for f in located], -1
            )
            gap = guess - (where - place_center) / place_scale  # normalized, as the head's outputs
            missed = gap.detach() * place_scale
            aux_errors.append(missed.view(count, args.history, -1, 3).norm(dim=-1).mean((0, 1)).numpy())
        else:
            out = model(inputs, (state - center) / scale)
        error = (out.view(count, args.horizon, actions) - y).square().mean(-1)
        loss = (error * mask).sum() / mask.sum().clamp(min=1)
        losses.append(loss.item())  # the actions' loss alone, as without --aux
        if located:
            loss = loss + args.aux * gap.square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if args.train_steps >= 100 and (step + 1) % (args.train_steps // 10) == 0:  # a line every tenth of the budget
            spent = time.perf_counter() - steady
            seen = f", located within {1e3 * np.mean(aux_errors[-100:], 0).round(4)} mm" if located else ""
            print(
                f"  step {step + 1}: loss {np.mean(losses[-100:]):.4g}, waited {waited / spent:.1%}{seen}", flush=True
            )
    ended = time.perf_counter()
    del batches
    steady_s = ended - steady
    checkpoint = {
        "kind": "pixels",
        # the aux head: training only, unless --feed-located makes it part of the policy
        "model": {k: v for k, v in model.state_dict().items() if args.feed_located or not k.startswith("aux.")},
        "located": 3 * len(located) if args.feed_located else 0,
        "fields": list(args.fields),
        "cameras": cameras,
        "obs": args.obs,
        "image_size": size,
        "crop": crop,
        "proprio": len(center),
        "hidden": args.hidden,
        "history": args.history,
        "horizon": args.horizon,
        "actions": actions,
        "center": norm.center,
        "scale": norm.scale,
        "action_center": target.center,
        "action_scale": target.scale,
        "pixel_center": [c.numpy() for c in pixel_center],
        "pixel_scale": [s.numpy() for s in pixel_scale],
    }
    tail = losses[-max(1, len(losses) // 20) :]
    if located:  # --aux: how far the training-only head's positions were from the recorded ones, the last 5% of steps
        errors = np.mean(aux_errors[-max(1, len(aux_errors) // 20) :], 0)
        aux_figures = {f"located_{f}_m": float(e) for f, e in zip(located, errors, strict=True)}
    else:
        aux_figures = {}
    later = max(1, args.train_steps - 1)
    figures = {
        "windows": len(dataset),
        "train_s": ended - began,
        "final_loss": float(np.mean(tail)),
        "workers": args.workers,
        "loader": args.loader,
        "first_batch_s": first_batch,
        "wait_share": waited / steady_s if steady_s > 0 else 0.0,
        "windows_per_s": later * args.batch / steady_s if steady_s > 0 else 0.0,
        "step_ms": 1e3 * steady_s / later,
        "aux": args.aux,
        "feed_located": args.feed_located,
        **aux_figures,
    }
    return checkpoint, figures


# --- training ----------------------------------------------------------------------------------------------------


def load_windows(
    run: str, history: int, horizon: int, target: str, first_only: bool = False, fields: tuple[str, ...] = FIELDS
) -> dict:
    """Every padded window of ``run`` as tensors: ``obs`` [W, history, D] (the state ``fields`` in order), ``action``
    [W, horizon, A] (``target``'s values), ``mask`` [W, horizon] (true where the action is a real step; with
    ``first_only``, the window's first action alone), and ``labelled``, the run's labelled steps (transitions: a
    window per transition)."""
    import torch

    import forge_gpu

    options = {"target": target} if target != "action" else {}  # the label's values in "action"
    dataset = forge_gpu.reading.WindowMapDataset(
        run, history=history, horizon=horizon, pad=True, observation_keys=fields, **options
    )
    batch = dataset[list(range(len(dataset)))]
    obs = torch.cat([batch[f"obs/{f}"].reshape(len(dataset), history, -1).float() for f in fields], dim=-1)
    action = batch["action"].float()
    mask = ~batch["action_is_pad"]
    if first_only:
        mask[:, 1:] = False
    return {"obs": obs, "action": action, "mask": mask, "labelled": len(dataset)}


def expert_chunk_windows(run: str, args, overrides: dict) -> dict:
    """The windows of the learner's rollouts ``run`` (recorded with their state) at the frames ``t`` with ``t %
    args.label_every == 0`` (and ``t < args.label_until`` when given: the stalled tails of failures left out),
    each with the expert's own chunk from that frame as its target (``forge_gpu._src.sim.relabel.expert_chunks``:
    the frames restored as the worlds of one env of ``args.relabel_envs`` worlds, the expert run ``args.horizon``
    steps from each); with ``args.segment_windows`` also the windows at the frames of each rolled-forward segment
    (step k's target: the segment's actions k and on, the rest masked). ``labelled`` counts the expert's calls:
    ``args.horizon`` per labelled frame, whatever they serve."""
    import torch

    import forge_gpu
    from forge_gpu._src.sim.relabel import expert_chunks

    history, horizon, observed = args.history, args.horizon, args.fields
    dataset = forge_gpu.reading.WindowMapDataset(
        run, history=history, horizon=horizon, pad=True, observation_keys=observed, state=True, params=True
    )
    batch = dataset[list(range(len(dataset)))]
    t = batch["t"].numpy()
    rows = np.flatnonzero((t % args.label_every == 0) & (t < (args.label_until or t.max() + 1)))
    obs = torch.cat([batch[f"obs/{f}"][rows].reshape(len(rows), history, -1).float() for f in observed], dim=-1)
    env = make_env(args.task, args.relabel_envs, args.demo_seed, overrides)
    state_names, param_names = list(env.state_fields), list(env.spec["params"])
    states = {n: batch[f"state/{n}"][rows, -1].numpy() for n in state_names}
    params = {n: batch[f"params/{n}"][rows].numpy() for n in param_names}
    fields = observed if args.segment_windows else ()
    parts = []
    began = time.perf_counter()
    for start in range(0, len(rows), args.relabel_envs):  # batches of frames, one world each (the last one filled)
        take = np.resize(np.arange(start, min(start + args.relabel_envs, len(rows))), args.relabel_envs)
        chunks = expert_chunks(
            env, {n: v[take] for n, v in states.items()}, {n: v[take] for n, v in params.items()}, horizon, fields
        )
        parts.append({k: v[: min(args.relabel_envs, len(rows) - start)] for k, v in chunks.items()})
    chunks = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    seconds = time.perf_counter() - began
    action, mask = torch.from_numpy(chunks["action"]), torch.from_numpy(chunks["valid"])
    out = {"obs": [obs], "action": [action], "mask": [mask]}
    if args.segment_windows:  # frame k of a segment: its history from the segment (and the window before it)
        segment = [torch.from_numpy(chunks[f"obs/{f}"]).reshape(len(rows), horizon, -1) for f in observed]
        segment = torch.cat(segment, -1)
        frames = torch.cat([obs[:, : history - 1], segment.float()], dim=1)  # [W, history - 1 + horizon, D]
        for k in range(1, horizon):
            keep = mask[:, k]
            shifted = torch.zeros_like(action)
            shifted[:, : horizon - k] = action[:, k:]
            shifted_mask = torch.zeros_like(mask)
            shifted_mask[:, : horizon - k] = mask[:, k:]
            out["obs"].append(frames[keep, k : k + history])
            out["action"].append(shifted[keep])
            out["mask"].append(shifted_mask[keep])
    windows = {k: torch.cat(v) for k, v in out.items()}
    return windows | {"labelled": len(rows) * horizon, "relabel_s": seconds, "labelled_frames": len(rows)}


def takeover_windows(run: str, args) -> dict:
    """The windows of the rollouts ``run`` (recorded with :class:`Takeover`) at the frames the expert acted in, each
    with the actions executed from there as its target, masked from the first step the learner acted again (or the
    episode ended): the expert's own chunk, as it carried it out. A frame is the expert's where its ``action`` equals
    its label clipped to the action bounds. ``labelled`` counts those frames (each one expert action, a target)."""
    import torch

    import forge_gpu

    windows = {}
    for target in ("action", LABEL):
        options = {"target": target} if target != "action" else {}
        dataset = forge_gpu.reading.WindowMapDataset(
            run, history=args.history, horizon=args.horizon, pad=True, observation_keys=args.fields, **options
        )
        windows[target] = dataset[list(range(len(dataset)))]
    executed, batch = windows["action"], windows[LABEL]
    spec = forge_gpu.reading.open_run(run).manifest["env_spec"]
    low = torch.as_tensor(np.asarray(spec["action_low"], np.float32))
    high = torch.as_tensor(np.asarray(spec["action_high"], np.float32))
    action = executed["action"].float()
    expert = (action == torch.clamp(batch["action"].float(), low, high)).all(-1) & ~executed["action_is_pad"]
    mask = expert.cumprod(-1).bool()  # the expert's steps from the window's frame on, up to the learner's next one
    rows = mask[:, 0]
    count = len(expert)
    obs = torch.cat([executed[f"obs/{f}"].reshape(count, args.history, -1).float() for f in args.fields], dim=-1)
    return {"obs": obs[rows], "action": action[rows], "mask": mask[rows], "labelled": int(rows.sum())}


def train(sources: list[dict], norm_run: str, args, seed: int) -> tuple[dict, dict]:
    """An MLP trained from scratch on the windows of ``sources`` (uniform over all of them; with
    ``args.rollout_share``, that share of each batch drawn from the sources after the first, the rollouts) for
    ``args.train_steps`` Adam steps; normalization from ``norm_run``'s statistics. Returns the checkpoint and its
    figures."""
    import torch

    import forge_gpu

    torch.manual_seed(seed)
    norm = forge_gpu.reading.normalization(norm_run, [f"obs/{f}" for f in args.fields])
    target = forge_gpu.reading.normalization(norm_run, ["action"])
    obs = torch.cat([s["obs"] for s in sources])
    action = torch.cat([s["action"] for s in sources])
    mask = torch.cat([s["mask"] for s in sources]).float()
    center, scale = torch.from_numpy(norm.center), torch.from_numpy(norm.scale)
    action_center, action_scale = torch.from_numpy(target.center), torch.from_numpy(target.scale)
    x = ((obs - center) / scale).flatten(1)
    y = (action - action_center) / action_scale
    windows, horizon, actions = y.shape
    model = build_model(x.shape[1], head_outputs(args.head, horizon * actions, args.mixtures), args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.train_steps)
    generator = torch.Generator().manual_seed(seed)
    began = time.perf_counter()
    losses = []
    first = len(sources[0]["obs"])
    from_rest = round(args.batch * args.rollout_share) if args.rollout_share and windows > first else 0
    for _ in range(args.train_steps):
        if from_rest:
            rest = first + torch.randint(windows - first, (from_rest,), generator=generator)
            rows = torch.cat([torch.randint(first, (args.batch - from_rest,), generator=generator), rest])
        else:
            rows = torch.randint(windows, (args.batch,), generator=generator)
        if args.head == "gmm":
            loss = mixture_nll(model(x[rows]), y[rows], mask[rows] > 0, args.mixtures, args.log_std_min)
        else:
            error = (model(x[rows]).view(-1, horizon, actions) - y[rows]).square().mean(-1)
            loss = (error * mask[rows]).sum() / mask[rows].sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - began
    checkpoint = {
        "model": model.state_dict(),
        "inputs": x.shape[1],
        "fields": list(args.fields),
        "hidden": args.hidden,
        "head": args.head,
        "mixtures": args.mixtures,
        "history": obs.shape[1],
        "horizon": horizon,
        "actions": actions,
        "center": norm.center,
        "scale": norm.scale,
        "action_center": target.center,
        "action_scale": target.scale,
    }
    tail = losses[-max(1, len(losses) // 20) :]  # the last 5% of the steps
    figures = {"windows": windows, "train_s": seconds, "final_loss": float(np.mean(tail))}
    return checkpoint, figures


# --- the env side ------------------------------------------------------------------------------------------------


def make_env(task: str, num_envs: int, seed: int, overrides: dict, label: bool = False, mix: float = 0.0):
    """``num_envs`` worlds of ``task`` on the CPU, rendering off where the task renders (its param ``render``) and
    no state recorded, then ``overrides``."""
    import forge_gpu

    settings = {"record_state": False} | overrides
    if hasattr(forge_gpu.sim.task_config(task).params, "render"):
        settings = {"params.render": False} | settings
    if label:
        settings["label"] = "expert"
    if mix:  # a per-episode share of the rollouts that the expert drives (recorded as the param expert_executed)
        settings["expert_mix"] = mix
    return forge_gpu.sim.make(task, num_envs=num_envs, seed=seed, device="cpu", **settings)


def torch_policy(env, checkpoint: dict, execution: str, steps_per_chunk: int):
    """The checkpoint's :class:`Chunker` driving ``env`` (its chunk executed as ``execution`` says)."""
    import forge_gpu

    chunk = {"steps_per_chunk": steps_per_chunk} if execution == "open_loop" else {}  # ensemble: its default decay
    fn = chunker(checkpoint, "cpu")
    return forge_gpu.sim.TorchPolicy(env, fn, name=f"imitation ({execution})", execution=execution, **chunk)


class Takeover:
    """The learner with the expert taking over where it departs from it (HG-DAgger's interventions, the gate a
    function of the two actions): ``inner``'s action for every env, except in the ``steps`` steps after an env's gap
    to the expert's label (``expert_action``, the env labels every frame) crossed ``gap``, where the label is
    executed instead. The gap: an exponential average (weight ``TAKEOVER_WEIGHT`` on the newest) of the largest
    per-joint difference of the two actions in units of the training's action scale ``scale``; it starts at 0 with
    each episode and again after each takeover, so short spikes (the expert switching targets a step before the
    learner does) do not trigger one. Whole-batch torch operations on the env's own buffers, no loop over envs; the
    executed actions are recorded as always, so a takeover's frames are those whose ``action`` is the clipped label
    (:func:`takeover_windows`). The script's envs are on the CPU; on CUDA these operations would have to run on the
    env's Warp stream, as :class:`forge_gpu.sim.TorchPolicy` runs its callable."""

    def __init__(self, env, inner, scale, gap: float, steps: int):
        import torch
        import warp as wp

        self.inner, self.gap, self.steps = inner, gap, steps
        self.label = wp.to_torch(env.observation[LABEL])
        self.step_id = wp.to_torch(env.observation["step_id"]).reshape(-1)
        self.scale = torch.as_tensor(scale, dtype=torch.float32, device=self.label.device)
        self.left = torch.zeros(env.num_envs, dtype=torch.int32, device=self.label.device)
        """Per env: the steps its current takeover still runs (0: the learner acts)."""
        self.average = torch.zeros(env.num_envs, device=self.label.device)
        """Per env: the averaged gap since its episode's start or its last takeover."""
        self.action = torch.zeros_like(self.label)

    def __call__(self, observation=None):
        import torch
        import warp as wp

        learner = wp.to_torch(self.inner(observation))
        first = self.step_id == 0
        self.left[first] = 0
        self.average[first] = 0.0
        gap = ((learner - self.label).abs() / self.scale).amax(-1)
        self.average.mul_(1.0 - TAKEOVER_WEIGHT).add_(TAKEOVER_WEIGHT * gap)
        self.left[(self.left == 0) & (self.average > self.gap)] = self.steps
        acting = self.left > 0
        self.average[acting] = 0.0
        torch.where(acting[:, None], self.label, learner, out=self.action)
        self.left -= acting.int()
        return wp.from_torch(self.action)


def success_figures(evaluation, prefix: str) -> dict:
    metrics = evaluation.metrics()
    out = {}
    for key in ("success_once", "success_at_end"):
        rate = metrics[key]
        out[f"{prefix}{key}"] = rate["rate"]
        out[f"{prefix}{key}_low"] = rate["low"]
        out[f"{prefix}{key}_high"] = rate["high"]
    at_end = metrics["success_at_end"]
    out[f"{prefix}success"] = f"{at_end['rate']:.1%} [{at_end['low']:.1%}, {at_end['high']:.1%}]"
    out[f"{prefix}length"] = metrics["length"]["mean"]
    out[f"{prefix}eval_s"] = evaluation.seconds
    return out


def score(eval_env, checkpoint: dict, args, shifts: dict | None = None) -> dict:
    """The checkpoint's success over ``args.episodes`` keyed episodes, for each execution asked for; then, executed
    as the first, in each env of ``shifts`` (name -> env: the evaluation's distribution shifted, ``--shift``), its
    figures under ``<name>_``."""
    import forge_gpu

    row = {}
    for execution in args.execution:
        policy = torch_policy(eval_env, checkpoint, execution, args.steps_per_chunk)
        evaluation = forge_gpu.recording.evaluate(eval_env, policy, episodes=args.episodes)
        row |= success_figures(evaluation, f"{execution}_")
    for name, env in (shifts or {}).items():
        policy = torch_policy(env, checkpoint, args.execution[0], args.steps_per_chunk)
        row |= success_figures(forge_gpu.recording.evaluate(env, policy, episodes=args.episodes), f"{name}_")
    return row


def parse_shifts(shifts: list[list[str]]) -> dict[str, dict]:
    """``--shift NAME KEY=VALUE ...`` (repeatable) as name -> overrides; ValueError (one line) naming a bad entry."""
    out = {}
    for entry in shifts:
        name, settings = entry[0], entry[1:]
        if not name.isidentifier() or "=" in name or name in out:
            raise ValueError(f"--shift {name!r}: expected a new name (letters, digits, _) and then KEY=VALUE overrides")
        if not settings:
            raise ValueError(f"--shift {name}: expected at least one KEY=VALUE override after the name")
        try:
            out[name] = dict(parse_override(text) for text in settings)
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"--shift {name}: {e}") from None
    return out


def record_demos(directory: Path, episodes: int, args, overrides: dict) -> dict:
    """The expert's first episode in each of ``episodes`` worlds, recorded (``env`` is the demo's index)."""
    import forge_gpu

    env = make_env(args.task, episodes, args.demo_seed, overrides)
    expert = forge_gpu.sim.make_policy("expert", env)
    evaluation = forge_gpu.recording.evaluate(env, expert, episodes=episodes, record=str(directory))
    assert (evaluation.worlds == np.arange(episodes)).all()  # one world per episode: world j ran episode j
    return {"expert_success": float(evaluation.success_at_end.mean()), "demo_s": evaluation.seconds}


def copied_demos(source: Path, directory: Path, episodes: int, args, overrides: dict) -> dict:
    """``--demos-from``: the demos an earlier run of this script recorded (its work folder's ``demos``), copied to
    ``directory`` where they are what :func:`record_demos` would record now: the same config (an env of this task,
    demo seed and overrides; ``num_envs`` aside; a state run takes a pixel run's demos, rendering changing no step)
    and at least ``episodes`` episodes. ValueError naming what differs."""
    import json

    import forge_gpu

    manifest = forge_gpu.reading.open_run(source).manifest
    env = make_env(args.task, 1, args.demo_seed, overrides)

    def flat(config: dict, prefix: str = "") -> dict:  # nested keys dotted, as --set names them
        out = {}
        for key, value in config.items():
            out |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
        return out

    want = flat(json.loads(json.dumps({**env.config.to_dict(), "num_envs": None})))
    have = flat(json.loads(json.dumps({**manifest["config"], "num_envs": None})))
    differ = {k for k in want.keys() | have.keys() if want.get(k) != have.get(k)}
    if want.get("params.values.render") is False and have.get("params.values.render") is True:
        differ.discard("params.values.render")  # rendered demos hold every column and step a state run records
    differ = sorted(differ)
    if differ:
        raise ValueError(f"--demos-from {source}: its config differs from this run's demos in {', '.join(differ)}")
    if manifest["config"]["num_envs"] < episodes:
        count = manifest["config"]["num_envs"]
        raise ValueError(f"--demos-from {source}: {count} demos, fewer than --demos {episodes}")
    shutil.copytree(source, directory)
    return {"demos_from": str(source)}


def first_demos(demos: Path, count: int, out: Path) -> Path:
    import forge_gpu

    forge_gpu.curation.select_run(demos, out, f"env < {count}")
    return out


def record_rollouts(directory: Path, checkpoint: dict, seed: int, args, overrides: dict) -> dict:
    """``args.dagger_episodes`` episodes the learner drives (keyed, seed ``seed``), each frame labelled with the
    expert's action for its observation."""
    import forge_gpu

    if args.label_steps == "expert":  # the rollouts' states, for the expert's chunks from them
        env = make_env(args.task, args.dagger_episodes, seed, overrides | {"record_state": True})
    else:
        env = make_env(args.task, args.dagger_episodes, seed, overrides, label=True, mix=args.mix)
    policy = torch_policy(env, checkpoint, "open_loop", args.steps_per_chunk)
    if args.label_steps == "takeover":
        policy = Takeover(env, policy, checkpoint["action_scale"], args.takeover_gap, args.takeover_steps)
    evaluation = forge_gpu.recording.evaluate(env, policy, episodes=args.dagger_episodes, record=str(directory))
    return {"rollout_success": float(evaluation.success_at_end.mean())}


# --- the run -----------------------------------------------------------------------------------------------------


def labelled_steps(run: Path) -> int:
    import forge_gpu

    return int(forge_gpu.curation.episode_values(run, ["length"])["length"].sum())


def build_parser() -> argparse.ArgumentParser:
    """The bench's arguments (``bench/generate.py`` trains its policies with their defaults)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--task", default="push", help="a task id or a task file (*.toml) whose expert gives the demos (default push)"
    )
    parser.add_argument("--demos", type=int, nargs="+", default=[25, 50, 100, 200, 400], help="N, expert demos")
    parser.add_argument("--episodes", type=int, default=500, help="evaluation episodes per point")
    parser.add_argument("--eval-envs", type=int, default=250)
    parser.add_argument("--execution", nargs="+", default=["open_loop", "ensemble"], choices=["open_loop", "ensemble"])
    parser.add_argument("--steps-per-chunk", type=int, default=4)
    parser.add_argument(
        "--obs",
        choices=OBS_KINDS,
        default="state",
        help="what the policy reads: the task's state vectors, or the cameras' RGB (rgbd: and depth) beside the "
        "proprio (no object or goal state)",
    )
    parser.add_argument(
        "--cameras", nargs="+", default=["front"], help="--obs rgb|rgbd: the cameras by name (front: the task's own)"
    )
    parser.add_argument(
        "--image-size", type=int, choices=[32, 64, 128], default=64, help="--obs rgb|rgbd: the rendered frames' side"
    )
    parser.add_argument(
        "--aux",
        type=float,
        default=0.0,
        help="--obs rgb|rgbd: the weight of an auxiliary loss in training: a head on the keypoints alone locating the "
        "task's object and goal (its environment_state fields' first 3 values, normalized); not part of the policy",
    )
    parser.add_argument(
        "--feed-located",
        action="store_true",
        help="--aux W: the head's located positions also go into the policy, beside the keypoints (detached: the "
        "auxiliary loss alone trains the head, which the saved policy keeps)",
    )
    parser.add_argument(
        "--crop",
        type=int,
        default=None,
        help="--obs rgb|rgbd: the random crop's side in px (default 7/8 of --image-size; --image-size itself: none)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="--obs rgb|rgbd: DataLoader workers gathering the training batches"
    )
    parser.add_argument(
        "--loader",
        choices=["mapped", "loaded"],
        default="mapped",
        help="--obs rgb|rgbd: the runs memory-mapped, each batch's frames decoded as it is gathered; or every frame "
        "decoded into each worker's memory as it opens them",
    )
    parser.add_argument("--history", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--train-steps", type=int, default=10000, help="Adam steps per training, whatever N")
    parser.add_argument(
        "--head",
        choices=["mse", "gmm"],
        default="mse",
        help="the policy's output: one chunk fit by mean squared error, or a mixture of --mixtures diagonal "
        "Gaussians over the whole chunk fit by negative log likelihood (executed: the most probable one's mean)",
    )
    parser.add_argument("--mixtures", type=int, default=5, help="--head gmm: the mixture's components")
    parser.add_argument(
        "--log-std-min",
        type=float,
        default=LOG_STD[0],
        help="--head gmm: the floor of each component's log standard deviation (of normalized actions) in training",
    )
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--dagger-rounds", type=int, default=3)
    parser.add_argument("--dagger-from", type=int, default=50, help="the demos DAgger starts from")
    parser.add_argument("--dagger-episodes", type=int, default=25, help="learner episodes labelled per round")
    parser.add_argument(
        "--label-steps",
        choices=["chunk", "first", "expert", "takeover"],
        default="chunk",
        help="what a rollout window supervises: its chunk of expert labels (at the learner's states), its first "
        "label alone, the expert's own chunk rolled forward from the window's state, or (takeover) the actions the "
        "expert executed where it took over from the learner",
    )
    parser.add_argument(
        "--takeover-gap",
        type=float,
        default=0.4,
        help="--label-steps takeover: the averaged action gap (in action scales) at which the expert takes over",
    )
    parser.add_argument(
        "--takeover-steps", type=int, default=16, help="--label-steps takeover: the steps each takeover lasts"
    )
    parser.add_argument(
        "--label-every", type=int, default=4, help="--label-steps expert: label the rollout frames t %% K == 0"
    )
    parser.add_argument(
        "--segment-windows",
        action="store_true",
        help="--label-steps expert: also train on the windows along each rolled-forward expert chunk",
    )
    parser.add_argument(
        "--rollout-share",
        type=float,
        default=None,
        help="DAgger training: the share of each batch drawn from the rollouts' windows (default: uniform)",
    )
    parser.add_argument(
        "--label-until", type=int, default=None, help="--label-steps expert: label the rollout frames t < T only"
    )
    parser.add_argument("--relabel-envs", type=int, default=256, help="--label-steps expert: worlds per batch")
    parser.add_argument("--mix", type=float, default=0.0, help="DAgger rollouts: the share the expert drives")
    parser.add_argument("--no-matched-bc", action="store_true", help="leave out BC at each round's labelled steps")
    parser.add_argument("--demo-seed", type=int, default=1)
    parser.add_argument(
        "--demos-from",
        default=None,
        metavar="RUN",
        help="copy the demos an earlier run of this script recorded (its --work folder's demos) instead of recording "
        "them again: refused unless their config is this run's (task, --demo-seed, --set, image size)",
    )
    parser.add_argument("--eval-seed", type=int, default=2)
    parser.add_argument("--train-seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override of every env, e.g. max_steps=100 (repeatable)")
    parser.add_argument(
        "--shift",
        nargs="+",
        action="append",
        default=[],
        metavar="NAME KEY=VALUE",
        help="an evaluation of every policy beyond its training's distribution: a name, then config overrides on top "
        "of the run's (as --set), e.g. --shift held_out 'randomize.cube_color={choices=[4, 5, 6, 7]}'; "
        "each row gets NAME_success (repeatable)",
    )
    parser.add_argument("--work", default=str(RESULTS / "tmp" / "imitation"), help="where runs are written")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    parser.add_argument(
        "--name", default=None, help="the results' file name without .json (default imitation, imitation-<task>)"
    )
    return parser


def main(argv=None) -> int:
    import torch
    import warp as wp

    parser = build_parser()
    args = parser.parse_args(argv)
    wp.config.quiet = True
    overrides = dict(args.overrides)
    try:
        shifted = parse_shifts(args.shift)
    except ValueError as e:
        parser.error(str(e))
    if args.obs != "state":  # the cameras render (the task's param render), at --image-size
        overrides = {"params.render": True, "params.image_size": args.image_size} | overrides
    try:  # the task and its expert, from a world of it: bad input is one line before anything runs
        probe = make_env(args.task, 1, args.demo_seed, overrides)
    except (ValueError, KeyError, FileNotFoundError) as e:
        parser.error(f"--task {args.task!r}: {e}")
    task_id = probe.spec["task"]
    if probe.task.expert(probe.world) is None:
        parser.error(f"--task {args.task!r}: task {task_id!r} has no expert to give the demos")
    args.fields, memory = policy_fields(probe.spec), expert_memory(probe)
    if args.obs != "state":
        try:
            check_cameras(probe.spec, args.cameras, args.obs, f"task {task_id!r}")
        except ValueError as e:
            parser.error(str(e))
        args.fields = (PROPRIO,)
    if args.name is None:
        args.name = "imitation" if task_id == "push" else f"imitation-{task_id}"
    if args.smoke:
        rounds = 0 if memory else 1  # a stateful expert: behaviour cloning alone (no DAgger labels)
        args.demos, args.dagger_from, args.dagger_rounds, args.dagger_episodes = [4, 6], 4, rounds, 2
        args.episodes, args.eval_envs, args.train_steps, args.batch, args.hidden = 4, 4, 20, 32, 32
        if args.obs != "state":  # the smallest frames
            args.batch = 8
            overrides["params.image_size"] = 32
        args.execution, args.relabel_envs = ["open_loop", "ensemble"], 8
        overrides.setdefault("max_steps", 20)
        if args.out:
            args.work = str(Path(args.out) / "imitation-work")
    if args.dagger_rounds and memory:
        parser.error(
            f"--dagger-rounds {args.dagger_rounds}: task {task_id!r}'s expert keeps per-world state "
            f"({', '.join(memory)}), so its label for a learner's frame is not a function of that frame (a restored "
            "frame restarts its machine, a learner's frames drive its phases); use --dagger-rounds 0"
        )
    if args.dagger_rounds and args.obs != "state" and args.label_steps != "chunk":
        parser.error(
            f"--label-steps {args.label_steps}: DAgger from the cameras (--obs {args.obs}) trains on the rollouts' "
            "chunks of expert labels; use --label-steps chunk"
        )
    if args.rollout_share is not None and args.obs != "state":
        parser.error(f"--rollout-share {args.rollout_share}: applies to --obs state (from the cameras: uniform)")
    if args.crop is not None and not (args.obs != "state" and 8 <= args.crop <= args.image_size):
        parser.error(
            f"--crop {args.crop}: expected a side from 8 to --image-size ({args.image_size}) px, with --obs rgb|rgbd"
        )
    if args.aux < 0 or (args.aux > 0 and args.obs == "state"):
        parser.error(f"--aux {args.aux}: expected a weight >= 0, with --obs rgb|rgbd")
    if args.feed_located and not args.aux > 0:
        parser.error("--feed-located: feeds the --aux head's positions to the policy; give --aux W (W > 0)")
    if args.workers < 0:
        parser.error(f"--workers {args.workers}: expected an integer >= 0")
    if args.dagger_rounds and args.dagger_from not in args.demos:
        parser.error(f"--dagger-from {args.dagger_from} is not one of --demos {args.demos}")
    if args.label_steps == "expert" and args.mix:
        parser.error(f"--mix {args.mix} does not apply to --label-steps expert (its rollouts are the learner's alone)")
    check_log_std_min(parser, "--log-std-min", args.log_std_min)
    if args.rollout_share is not None and not 0.0 < args.rollout_share < 1.0:
        parser.error(f"--rollout-share {args.rollout_share}: expected a share strictly between 0 and 1")
    if args.label_steps == "takeover" and args.mix:
        parser.error(f"--mix {args.mix} does not apply to --label-steps takeover (the expert acts where it takes over)")
    if not (np.isfinite(args.takeover_gap) and args.takeover_gap > 0):
        parser.error(f"--takeover-gap {args.takeover_gap}: expected a finite number > 0")
    for flag in ("label_every", "relabel_envs", "label_until", "mixtures", "takeover_steps"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected an integer >= 1")
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    largest = max(args.demos)
    demos = work / "demos"
    if args.demos_from:
        try:
            collection = copied_demos(Path(args.demos_from), demos, largest, args, overrides)
        except (OSError, ValueError) as error:
            parser.error(str(error))
        print(f"{largest} expert demos copied from {args.demos_from}", flush=True)
    else:
        collection = record_demos(demos, largest, args, overrides)
        success, seconds = collection["expert_success"], collection["demo_s"]
        print(f"{largest} expert demos: success {success:.3f}, {seconds:.1f} s", flush=True)
    eval_env = make_env(args.task, args.eval_envs, args.eval_seed, overrides)
    shift_envs = {
        name: make_env(args.task, args.eval_envs, args.eval_seed, overrides | s) for name, s in shifted.items()
    }

    loaded = {}

    def load(run: Path, target: str) -> dict:  # each run's windows once (the expert's chunks are costly)
        if run not in loaded:
            if target == LABEL and args.label_steps == "takeover":
                loaded[run] = takeover_windows(str(run), args)
                print(f"{run.name}: {loaded[run]['labelled']} frames the expert took over", flush=True)
            elif target == LABEL and args.label_steps == "expert":
                loaded[run] = expert_chunk_windows(str(run), args, overrides)
                frames, seconds = loaded[run]["labelled_frames"], loaded[run]["relabel_s"]
                print(f"{run.name}: expert chunks from {frames} frames, {seconds:.1f} s", flush=True)
            else:
                first_only = args.label_steps == "first" and target == LABEL
                loaded[run] = load_windows(str(run), args.history, args.horizon, target, first_only, args.fields)
        return loaded[run]

    def point(kind: str, runs: list[tuple[Path, str]], norm_run: Path, **row) -> tuple[dict, dict]:
        if args.obs == "state":
            sources = [load(r, t) for r, t in runs]
            checkpoint, figures = train(sources, str(norm_run), args, args.train_seed)
            labelled = sum(s["labelled"] for s in sources)
        else:  # the windows gathered per batch by the loader (--loader)
            checkpoint, figures = train_pixels([(str(r), t) for r, t in runs], str(norm_run), args, args.train_seed)
            labelled = figures["windows"]
        row = {"method": kind, **row, "labelled_steps": labelled, **figures}
        row["checkpoint"] = str(work / f"{kind}-{row['demos']}-{row.get('round', 0)}.pt")
        torch.save(checkpoint, row["checkpoint"])  # for make_policy
        row |= score(eval_env, checkpoint, args, shift_envs)
        print(table([row], columns(args)), flush=True)
        return row, checkpoint

    def write(done: bool) -> Path:  # the results so far: after each row (a long run keeps its rows), and at the end
        verdict = dagger_verdict(rows, args.execution[0])
        labels = args.label_steps + (f", every {args.label_every} frames" if args.label_steps == "expert" else "")
        labels += ", segment windows" if args.label_steps == "expert" and args.segment_windows else ""
        labels += f"; head: mixture of {args.mixtures} Gaussians" if args.head == "gmm" else ""
        labels += f", log std >= {args.log_std_min:g}" if args.head == "gmm" and args.log_std_min != LOG_STD[0] else ""
        md = f"## {task_id}: behaviour cloning against demos"
        if args.dagger_rounds:
            md += f", then DAgger (cpu, {args.episodes} episodes a point, rollout labels: {labels})\n\n"
        else:
            reads = ", ".join(args.fields)
            if args.obs != "state":
                size = overrides["params.image_size"]
                reads += f" and {args.obs} of the cameras {', '.join(args.cameras)} at {size} px"
            md += f" (cpu, {args.episodes} episodes a point, the policy reads {reads})\n\n"
        md += table(rows, columns(args)) + "\n\n" + verdict["text"]
        settings = {k: v for k, v in vars(args).items() if k not in ("overrides",)} | {"task_id": task_id}
        settings["shift"] = shifted
        payload = {"machine": machine(), "settings": settings, "overrides": overrides, "collection": collection}
        payload |= {"rows": rows, "verdict": verdict, "complete": done}
        path = save(args.name, payload, md, args.out)
        if done:
            print("\n" + md)
        return path

    rows, steps_of = [], {}
    checkpoints = {}
    for n in sorted(args.demos):
        run = first_demos(demos, n, work / f"demos-{n}")
        row, checkpoints[n] = point("bc", [(run, "action")], run, demos=n, rollouts=0)
        steps_of[n] = row["labelled_steps"]
        rows.append(row)
        write(done=False)

    if args.dagger_rounds:
        base = work / f"demos-{args.dagger_from}"
        runs, checkpoint = [(base, "action")], checkpoints[args.dagger_from]
        for k in range(1, args.dagger_rounds + 1):
            rollouts = work / f"dagger-{k}"
            collected = record_rollouts(rollouts, checkpoint, args.demo_seed + 100 * k, args, overrides)
            runs.append((rollouts, LABEL))
            row, checkpoint = point(
                "dagger", runs, base, demos=args.dagger_from, rollouts=k * args.dagger_episodes, round=k, **collected
            )
            rows.append(row)
            write(done=False)
            if not args.no_matched_bc:  # BC on the fewest first demos with at least as many labelled steps
                matched = matched_demos(demos, row["labelled_steps"], largest)
                if matched is not None and matched not in steps_of:
                    run = first_demos(demos, matched, work / f"demos-{matched}")
                    bc_row, _ = point("bc_matched", [(run, "action")], run, demos=matched, rollouts=0, round=k)
                    steps_of[matched] = bc_row["labelled_steps"]
                    rows.append(bc_row)
                    write(done=False)

    path = write(done=True)
    print(f"\nwrote {path}")
    return 0


def matched_demos(demos: Path, steps: int, largest: int) -> int | None:
    """The fewest first demos whose transitions reach ``steps`` (None when all of them do not)."""
    import forge_gpu

    values = forge_gpu.curation.episode_values(demos, ["env", "length"])
    lengths = values["length"][np.argsort(values["env"])]
    reached = np.flatnonzero(np.cumsum(lengths) >= steps)
    return int(reached[0]) + 1 if len(reached) else None


def dagger_verdict(rows: list[dict], execution: str) -> dict:
    """The targets: BC on 200 demos at least 85%; DAgger at BC's best success with at most half its labelled steps."""
    key = f"{execution}_success_at_end"
    bc = sorted((r for r in rows if r["method"].startswith("bc")), key=lambda r: r["labelled_steps"])
    dagger = [r for r in rows if r["method"] == "dagger"]
    bc200 = next((r[key] for r in bc if r["demos"] == 200 and r["method"] == "bc"), None)
    goal = 0.85
    bc_needs = next((r for r in bc if r[key] >= goal), None)
    dagger_reaches = next((r for r in dagger if r[key] >= goal), None)
    won = bool(bc_needs and dagger_reaches and dagger_reaches["labelled_steps"] * 2 <= bc_needs["labelled_steps"])
    lines = [f"Targets ({execution}, success at the end):"]
    lines.append(f"- BC on 200 demos >= {goal:.0%}: " + ("not run" if bc200 is None else f"{bc200:.1%}"))
    lines.append(
        f"- BC first reaches {goal:.0%} at "
        + (f"{bc_needs['demos']} demos, {bc_needs['labelled_steps']} labelled steps" if bc_needs else "no N measured")
    )
    if dagger:
        reached = (
            f"round {dagger_reaches['round']}, {dagger_reaches['labelled_steps']} labelled steps"
            if dagger_reaches
            else "no round"
        )
        lines.append(f"- DAgger first reaches {goal:.0%} at {reached}")
        lines.append(f"- DAgger with at most half BC's labelled steps: {'yes' if won else 'no'}")
    else:
        lines.append("- DAgger: not run")
    return {
        "goal": goal,
        "bc_200": bc200,
        "bc_needs_steps": bc_needs["labelled_steps"] if bc_needs else None,
        "dagger_needs_steps": dagger_reaches["labelled_steps"] if dagger_reaches else None,
        "dagger_won": won,
        "text": "\n".join(lines),
    }


def columns(args) -> list[str]:
    """The table's columns: per execution, success at the end with its 95% interval, and success once."""
    cols = ["method", "round", "demos", "rollouts", "labelled_steps", "train_s", "final_loss"]
    if args.obs != "state":  # the loader: the steps' share spent waiting for a batch, windows trained per second
        cols += ["wait_share", "windows_per_s"]
    for execution in args.execution:
        cols += [f"{execution}_success", f"{execution}_success_once"]
    return cols + [f"{entry[0]}_success" for entry in args.shift]


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())

"""LeRobot policies in forge_gpu's evaluation: ``--policy lerobot:PATH``.

``lerobot_policy(path, env)`` loads what ``lerobot-train`` wrote (its output directory, a checkpoint's
``pretrained_model`` or any directory holding ``config.json`` and ``model.safetensors``): the policy class the saved
config's ``type`` names, through LeRobot's own factory, and LeRobot's own pre- and post-processors from the files
saved beside it (normalization with the dataset's statistics, device placement). It returns a torch callable over the
whole batch of envs, ``fn(observation: dict[str, torch.Tensor]) -> torch.Tensor``, that
:class:`~forge_gpu._src.sim.policies.TorchPolicy` drives.

The env's observation fields reach the policy under the names forge_gpu's LeRobot export gives them
(``core/lerobot_features.py``): ``observation.state`` = ``proprio``, ``observation.environment_state`` = the
environment-state fields (the task's declared ones, else every vector field but ``proprio``) concatenated in order,
``observation.images.<camera>`` = the camera as float CHW in [0, 1], and ``task`` = each env's instruction. The
policy's ``config.input_features`` and ``output_features`` are checked against the env when it is loaded.

Episodes start at different steps in different envs, and LeRobot's ``select_action`` keeps one queue of actions for
the whole batch (``reset`` clears it for every env). So a policy with a chunk API is called through
``predict_action_chunk``: the callable returns ``[N, H, A]`` and carries ``chunk = H``, and forge_gpu's executor
runs each env's chunk on its own (``TorchPolicy``). H is the policy's ``n_action_steps`` (the chunk's first actions,
those LeRobot runs open loop), so that the executor's default, the whole chunk open loop, is LeRobot's; a policy
whose config sets ACT's ``temporal_ensemble_coeff`` returns its whole chunk, to be run with
``execution="ensemble"`` (``--chunk-exec ensemble``) and that coefficient as ``ensemble_decay``.
Only a policy without a chunk API is called through ``select_action``: then ``reset`` runs whenever any env starts an
episode, which clears the queue of every env (they all re-plan at that step), and the figures depend on the number
of envs.

LeRobot is imported here alone, and only when a ``lerobot:`` policy is loaded.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Callable

import numpy as np
import warp as wp

from forge_gpu._src.core.cameras import image_fields
from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.core.instructions import TEMPLATE_KEY, episode_instructions
from forge_gpu._src.core.labels import label_fields
from forge_gpu._src.core.lerobot_features import (
    ENVIRONMENT_STATE,
    IMAGES,
    STATE,
    STATE_FIELD,
    declared_environment_state,
    environment_fields,
)

INSTALL = (
    'lerobot policies need LeRobot: pip install "lerobot[dataset]>=0.6,<0.7" (LeRobot 0.6 needs Python >= 3.12 and '
    "torch < 2.12)"
)
ACTION = "action"


class LeRobotMissing(ImportError, ValueError):
    """LeRobot is not installed (an ImportError, and a ValueError as every bad policy name is)."""


def resolve_directory(path: str | os.PathLike) -> str:
    """The directory holding the policy's ``config.json``: ``path`` itself, its ``pretrained_model`` (a checkpoint)
    or its ``checkpoints/last/pretrained_model`` (a ``lerobot-train`` output directory). ValueError naming ``path``."""
    path = os.fspath(path)
    candidates = (
        path,
        os.path.join(path, "pretrained_model"),
        os.path.join(path, "checkpoints", "last", "pretrained_model"),
    )
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "config.json")):
            return candidate
    raise ValueError(
        f"lerobot:{path}: no LeRobot policy there; expected a lerobot-train output directory (with "
        "checkpoints/last/pretrained_model) or a pretrained_model directory holding config.json"
    )


def load_pretrained(directory: str, device: str):
    """``(policy, preprocessor, postprocessor)`` from a ``pretrained_model`` directory, through LeRobot: the policy
    class of the saved config's ``type`` (``get_policy_class``), its weights, and the saved processor pipelines, all
    on the torch ``device``. :class:`LeRobotMissing` (one line: how to install it) without LeRobot."""
    try:
        from lerobot.configs import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    except ImportError as e:
        raise LeRobotMissing(f"{INSTALL}; importing it failed: {e}") from None
    config = PreTrainedConfig.from_pretrained(directory)
    config.device = device
    with contextlib.redirect_stdout(io.StringIO()):  # "Loading weights from local directory"
        policy = get_policy_class(config.type).from_pretrained(directory, config=config)
    on_device = {"device_processor": {"device": device}}
    preprocessor, postprocessor = make_pre_post_processors(
        config, pretrained_path=directory, preprocessor_overrides=on_device, postprocessor_overrides=on_device
    )
    return policy, preprocessor, postprocessor


def lerobot_policy(
    path: str | os.PathLike,
    env,
    *,
    mode: str = "auto",
    loader: Callable | None = None,
):
    """The torch callable that runs the LeRobot policy at ``path`` in ``env`` (the module's docstring).

    Args:
        path: a ``lerobot-train`` output directory, a checkpoint directory or a ``pretrained_model`` directory.
        env: the :class:`~forge_gpu._src.sim.env.VectorEnv` it will drive (its spec and device).
        mode: ``"auto"`` (the chunk API where the policy has one, else ``select_action``), ``"chunk"`` or
            ``"select_action"``.
        loader: ``(directory, torch_device) -> (policy, preprocessor, postprocessor)``; default
            :func:`load_pretrained` (LeRobot's own loading).

    Raises ValueError (one line) for a path without a policy, a feature the policy takes that the env does not give
    or gives with another shape, an action of another width, an unknown mode; :class:`LeRobotMissing` without LeRobot.
    """
    if mode not in ("auto", "chunk", "select_action"):
        raise ValueError(f"lerobot policy mode={mode!r}; allowed: auto, chunk, select_action")
    directory = resolve_directory(path)
    device = str(wp.device_to_torch(env.device))
    policy, preprocessor, postprocessor = (loader or load_pretrained)(directory, device)
    return LeRobotPolicy(policy, preprocessor, postprocessor, env, name=f"lerobot:{os.fspath(path)}", mode=mode)


def env_features(spec: dict) -> tuple[dict[str, tuple[int, ...]], list[str], list[str]]:
    """The LeRobot features ``spec``'s env gives: name -> shape (as LeRobot's ``PolicyFeature.shape``), the
    environment-state fields in order and the camera fields."""
    layout = observation_layout(spec)
    features = {STATE: tuple(layout[STATE_FIELD][0])}
    labels = tuple(label_fields(spec))  # the learner's targets, never its inputs
    fields = environment_fields(layout, declared_environment_state(spec), name=f"task {spec['task']!r}", labels=labels)
    if fields:
        features[ENVIRONMENT_STATE] = (sum(math.prod(layout[f][0]) for f in fields),)
    cameras = image_fields(layout)
    for camera in cameras:
        height, width, channels = layout[camera][0]
        features[IMAGES + camera] = (channels, height, width)
    return features, fields, cameras


def _shape(feature) -> tuple[int, ...]:
    shape = feature.shape if hasattr(feature, "shape") else feature["shape"]
    return tuple(int(n) for n in shape)


class LeRobotPolicy:
    """A loaded LeRobot policy as forge_gpu's torch callable over the whole batch (the module's docstring).

    Attributes set for the executor: ``chunk`` (H: the callable returns ``[N, H, A]``: the first ``n_action_steps``
    of each predicted chunk, or the whole ``predicted`` chunk where ``temporal_ensemble_coeff`` (ACT's ensembling)
    is set), in the chunk mode; ``history`` (h: each observation field comes as ``[N, h, ...]``, oldest first) where
    the policy takes ``n_obs_steps`` > 1. ``mode`` says which API is called (``"chunk"`` or ``"select_action"``).
    """

    def __init__(self, policy, preprocessor, postprocessor, env, *, name: str, mode: str = "auto"):
        import torch

        self._torch = torch
        self.policy, self.preprocessor, self.postprocessor = policy, preprocessor, postprocessor
        self.name = name
        self.env = env
        self.spec = env.spec
        self.num_envs = env.num_envs
        self.action_dim = int(self.spec["action_shape"][0])
        self.device = torch.device(str(wp.device_to_torch(env.device)))
        config = policy.config
        given, self.environment_fields, self.cameras = env_features(self.spec)
        self.inputs = self._check_features(config, given)
        steps = int(getattr(config, "n_obs_steps", 1) or 1)
        has_chunk = callable(getattr(policy, "predict_action_chunk", None))
        if mode == "chunk" and not has_chunk:
            raise ValueError(f"{name}: {type(policy).__name__} has no predict_action_chunk; use mode='select_action'")
        self.mode = "chunk" if has_chunk and mode != "select_action" else "select_action"
        if self.mode == "chunk":
            if steps > 1:
                self.history = steps
            self.predicted = self._probe_chunk()
            """The length of the chunks the policy predicts."""
            self.n_action_steps = min(int(getattr(config, "n_action_steps", None) or self.predicted), self.predicted)
            self.temporal_ensemble_coeff = getattr(config, "temporal_ensemble_coeff", None)
            self.chunk = self.predicted if self.temporal_ensemble_coeff is not None else self.n_action_steps
        if self.mode == "select_action":
            policy.reset()
        self._instructions = None if TEMPLATE_KEY in self.spec else [self.spec["instruction"]] * self.num_envs

    def _check_features(self, config, given: dict) -> list[str]:
        """The policy's input features, each given by the env with its shape, and its action as wide as the env's;
        ValueError naming the first that is not."""
        taken = dict(getattr(config, "input_features", None) or {})
        offered = ", ".join(f"{k} {list(s)}" for k, s in given.items())
        for key, feature in taken.items():
            if key not in given:
                raise ValueError(
                    f"{self.name} takes {key} {list(_shape(feature))}, which task {self.spec['task']!r} does not give; "
                    f"it gives: {offered}"
                )
            if _shape(feature) != given[key]:
                raise ValueError(
                    f"{self.name} takes {key} of shape {list(_shape(feature))}; task {self.spec['task']!r} gives "
                    f"{list(given[key])}"
                )
        outputs = dict(getattr(config, "output_features", None) or {})
        if ACTION not in outputs:
            raise ValueError(f"{self.name} has no {ACTION!r} output feature; it has: {', '.join(outputs) or 'none'}")
        if _shape(outputs[ACTION]) != (self.action_dim,):
            raise ValueError(
                f"{self.name} gives {ACTION} of shape {list(_shape(outputs[ACTION]))}; task {self.spec['task']!r} "
                f"takes [{self.action_dim}]"
            )
        return list(taken)

    def _probe_chunk(self) -> int:
        """H, the length of the chunks the policy predicts, from one prediction on one zero observation."""
        torch = self._torch
        layout = observation_layout(self.spec)
        history = (self.history,) if hasattr(self, "history") else ()
        zeros = {
            field: torch.from_numpy(np.zeros((1, *history, *layout[field][0]), layout[field][1])).to(self.device)
            for field in (STATE_FIELD, *self.environment_fields, *self.cameras)
        }
        chunk = self._predict(zeros, count=1)
        if chunk.ndim != 3 or chunk.shape[0] != 1 or chunk.shape[2] != self.action_dim:
            raise ValueError(
                f"{self.name}: predict_action_chunk gave shape {list(chunk.shape)}; expected [1, H, {self.action_dim}]"
            )
        return int(chunk.shape[1])

    def batch(self, observation: dict, count: int | None = None) -> dict:
        """The policy's input batch from the env's observation tensors (``[N, ...]``, or ``[N, h, ...]`` with a
        history): only the features the policy takes, under their LeRobot names, and ``task``."""
        torch = self._torch
        count = self.num_envs if count is None else count
        lead = observation[STATE_FIELD].shape[: 1 + hasattr(self, "history")]
        out = {}
        if STATE in self.inputs:
            out[STATE] = observation[STATE_FIELD].to(torch.float32)
        if ENVIRONMENT_STATE in self.inputs:
            parts = [observation[f].reshape(*lead, -1).to(torch.float32) for f in self.environment_fields]
            out[ENVIRONMENT_STATE] = torch.cat(parts, dim=-1)
        for camera in self.cameras:
            if IMAGES + camera in self.inputs:  # [..., H, W, C] uint8 -> [..., C, H, W] float in [0, 1]
                out[IMAGES + camera] = observation[camera].movedim(-1, -3).to(torch.float32) / 255.0
        out["task"] = self._tasks(count)
        return out

    def _tasks(self, count: int) -> list[str]:
        """Each env's instruction: the task's one, or its template over each env's drawn params."""
        if count != self.num_envs:
            return [self.spec["instruction"]] * count
        if self._instructions is not None:
            return self._instructions
        params = {name: values.numpy() for name, values in self.env.randomizer.recorded.items()}
        return list(episode_instructions(self.spec[TEMPLATE_KEY], params, count=count))

    def _predict(self, observation: dict, count: int | None = None):
        batch = self.preprocessor(self.batch(observation, count))
        return self._action(self.postprocessor(self.policy.predict_action_chunk(batch)))

    def _action(self, action):
        torch = self._torch
        if not isinstance(action, torch.Tensor):
            raise ValueError(f"{self.name} returned a {type(action).__name__}; expected a torch.Tensor")
        return action.to(device=self.device, dtype=torch.float32)

    def __call__(self, observation: dict):
        if self.mode == "chunk":
            return self._predict(observation)[:, : self.chunk].contiguous()
        # select_action keeps one queue for the whole batch: cleared for every env when any env starts an episode.
        if bool((observation["step_id"] == 0).any()):
            self.policy.reset()
        batch = self.preprocessor(self.batch(observation))
        return self._action(self.postprocessor(self.policy.select_action(batch)))

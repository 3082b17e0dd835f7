"""Source demonstrations of bench/tasks/tray.toml: a short script standing in for a person's demonstrations.

It drives the Panda's end-effector action (``variant="ee"``: the tcp's position change, 1 cm per unit, and the
gripper's width) per world with a small state machine over whole arrays (numpy over the envs, no Python per env):
over the cube, down, close, up (from above the cube again where the grasp missed), over
the tray, open, away. Each episode draws its own offsets (the grasp point up to
5 mm off the cube's centre, the drop point up to 2 cm off the tray's), so the demonstrations differ as a person's
would. The episodes are recorded with ``forge_gpu.recording.collect`` as any policy's.

python bench/tasks/tray_sources.py runs/tray-sources --episodes 10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

TASK_FILE = str(Path(__file__).with_name("tray.toml"))
TRAY = np.array([0.5, 0.22])
"""The tray's centre on the table [m] (tray.toml's tray_position)."""
OPEN, CLOSED = 0.08, 0.0
CARRY_HEIGHT, AWAY_HEIGHT = 0.11, 0.24
"""The tcp's height while carrying (the cube's bottom above the walls) and after letting go [m]."""
HOLD_STEPS = 20
"""Control steps the gripper is given to close or open."""


class TraySource:
    """``(observation) -> action`` for ``num_envs`` worlds: the scripted pick and drop, one phase per world."""

    def __init__(self, num_envs: int, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.phase = np.zeros(num_envs, dtype=np.int64)
        """Each world's phase: 0 over the cube, 1 down, 2 close, 3 up, 4 over the tray, 5 open, 6 away."""
        self.timer = np.zeros(num_envs, dtype=np.int64)
        self.grasp_offset = np.zeros((num_envs, 2))
        self.drop_offset = np.zeros((num_envs, 2))

    def __call__(self, observation: dict) -> np.ndarray:
        step = np.asarray(observation["step_id"].numpy())
        tcp = np.asarray(observation["proprio"].numpy())[:, 18:21]
        cube = np.asarray(observation["cube_pose"].numpy())[:, :3]
        new = step == 0
        count = int(new.sum())
        self.phase[new], self.timer[new] = 0, 0
        self.grasp_offset[new] = self.rng.uniform(-0.005, 0.005, (count, 2))
        self.drop_offset[new] = self.rng.uniform(-0.02, 0.02, (count, 2))
        target = np.empty_like(tcp)
        grasp_xy = cube[:, :2] + self.grasp_offset
        target[:, :2] = grasp_xy
        target[:, 2] = cube[:, 2] + 0.1
        phase = self.phase
        down = phase >= 1
        target[down, 2] = cube[down, 2]
        lifted = phase >= 3
        target[lifted, :2] = tcp[lifted, :2]
        target[lifted, 2] = CARRY_HEIGHT
        carry = phase >= 4
        target[carry, :2] = TRAY + self.drop_offset[carry]
        away = phase >= 6
        target[away, 2] = AWAY_HEIGHT
        error = target - tcp
        distance = np.linalg.norm(error, axis=1)
        self.timer += 1
        settled = (np.abs(error[:, 2]) < 0.01) | (self.timer > 40)  # the fingertips may meet the table first
        over = np.linalg.norm(error[:, :2], axis=1) < 0.005
        advance = ((phase == 0) & (distance < 0.01)) | ((phase == 1) & over & settled)
        advance |= ((phase == 2) | (phase == 5)) & (self.timer > HOLD_STEPS)
        advance |= ((phase == 3) & (tcp[:, 2] > CARRY_HEIGHT - 0.01)) | ((phase == 4) & (distance < 0.01))
        advance &= phase < 6
        # A missed grasp (the tcp up, the cube still on the table) starts over from above the cube, as a person would.
        missed = (phase >= 3) & (phase <= 4) & (tcp[:, 2] > cube[:, 2] + 0.06)
        self.phase = np.where(missed, 0, phase + advance)
        self.timer[advance | missed] = 0
        action = np.zeros((len(tcp), 7), dtype=np.float32)
        closed = (self.phase >= 2) & (self.phase <= 4)
        speed = np.where(closed, 0.5, 1.0)[:, None]  # slower with the cube in hand: it does not slip
        action[:, :3] = np.clip(error / 0.01, -speed, speed)
        action[:, 6] = np.where(closed, CLOSED, OPEN)
        still = (self.phase == 2) | (self.phase == 5)
        action[still, :3] = 0.0
        return action


def record(directory: str, episodes: int = 10, num_envs: int = 10, device: str = "cpu", seed: int = 0, **overrides):
    """Record ``episodes`` scripted demonstrations of the tray task into the new run ``directory``."""
    import forge_gpu

    env = forge_gpu.sim.make(TASK_FILE, num_envs=num_envs, device=device, seed=seed, variant="ee", **overrides)
    return forge_gpu.recording.collect(env, TraySource(num_envs, seed), directory, episodes=episodes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    summary = record(args.out, args.episodes, args.envs, args.device, args.seed)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

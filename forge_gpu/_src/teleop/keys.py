"""The key map of ``forge-gpu teleop``: what each keyboard key and gamepad input does to the end-effector action
(``[action] kind = "ee_delta"``: six pose columns, then the gripper's) and to the episode. The default is the
package's ``keys.toml`` (docs/teleop.md shows it); a file given with ``--keys`` changes the entries it names.

An input is named as the page reports it: a keyboard key by its ``KeyboardEvent.code`` (``KeyW``, ``ArrowUp``,
``Space``), a gamepad's axis ``axis:N`` and button ``button:N`` (the browser's standard layout). The action of a
step is the sum over the held inputs of their moves (a key or button counts 1, a stick its deflection past the dead
zone, a trigger its pull), times the speed, clipped to the action's bounds, with the gripper's columns at their open
or closed values. The standard library and numpy."""

from __future__ import annotations

import re
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from forge_gpu._src.core.checks import finite_number

MOVES = ("dx", "dy", "dz", "droll", "dpitch", "dyaw")
"""The end-effector action's pose columns, in order: the point's translation, then its rotation vector."""
COMMANDS = ("start", "keep", "discard", "gripper")
"""What a pressed input may do besides a move or a speed."""
DEFAULT_FILE = Path(__file__).with_name("keys.toml")
"""The default key map."""
_CODE = re.compile(r"^[A-Z][A-Za-z0-9]*$")  # KeyboardEvent.code: KeyW, ArrowUp, Digit1, Space, NumpadAdd, F1
_INDEX = re.compile(r"^[0-9]{1,2}$")
_DESCRIBED = {"dx": "x", "dy": "y", "dz": "z", "droll": "roll", "dpitch": "pitch", "dyaw": "yaw"}


@dataclass(frozen=True)
class KeyMap:
    """The inputs and what they do: ``moves`` (input -> (pose column, value)), ``speeds`` (input -> speed),
    ``commands`` (input -> one of :data:`COMMANDS`), the ``speed`` at start and the sticks' ``deadzone``."""

    moves: dict[str, tuple[int, float]] = field(default_factory=dict)
    speeds: dict[str, float] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    speed: float = 0.5
    deadzone: float = 0.15

    def action(self, held: Mapping[str, float], speed: float, low, high, gripper_closed: bool) -> np.ndarray:
        """The action (float32 [A]) of the ``held`` inputs (input -> its magnitude: 1 for a key, a stick's
        deflection), each move's value times ``speed`` summed per column and clipped to ``[low, high]``; the
        columns after the six the gripper's: ``low`` closed, ``high`` open."""
        low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        action = np.zeros(len(low), np.float32)
        for name, amount in held.items():
            if name in self.moves:
                column, value = self.moves[name]
                action[column] += np.float32(value * self.magnitude(name, amount) * speed)
        action[len(MOVES) :] = low[len(MOVES) :] if gripper_closed else high[len(MOVES) :]
        return np.clip(action, low, high)

    def magnitude(self, name: str, amount: float) -> float:
        """How much a held input counts: a stick's deflection past the dead zone (0 within it), a key's 1."""
        if name.startswith("axis:"):
            return float(amount) if abs(amount) > self.deadzone else 0.0
        return float(amount)

    def rows(self) -> list[dict]:
        """The table the page shows: one row per input, ``{"input": ..., "does": ...}``, keys first."""
        rows = []
        for name, (column, value) in self.moves.items():
            rows.append({"input": name, "does": f"move {_DESCRIBED[MOVES[column]]} {value:+g}"})
        for name, speed in self.speeds.items():
            rows.append({"input": name, "does": f"speed {speed:g}"})
        for name, command in self.commands.items():
            rows.append({"input": name, "does": command})
        return sorted(rows, key=lambda r: (r["input"].startswith(("axis:", "button:")), _order(r["does"])))


def _order(does: str) -> int:
    for i, word in enumerate(("move", "gripper", "speed", "start", "keep", "discard")):
        if does.startswith(word):
            return i
    return 9


def load_keymap(path: str | Path | None = None) -> KeyMap:
    """The default key map, changed by the file ``path`` (its entries replace the default's of the same input;
    ``"none"`` removes one). ValueError in one line naming the file, the key and what is allowed."""
    table = _read(DEFAULT_FILE)
    if path is not None:
        table = _merged(table, _read(Path(path)), str(path))
    return _keymap(table, str(path or DEFAULT_FILE))


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read the key map ({e.strerror})") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from e


def _merged(base: dict, top: dict, source: str) -> dict:
    allowed = {"speed": None, "keys": None, "gamepad": {"deadzone": None, "axes": None, "buttons": None}}
    for key, value in top.items():
        if key not in allowed:
            raise ValueError(f"{source}: unknown key {key!r}; a key map holds speed, [keys] and [gamepad]")
        if allowed[key] is None and key != "speed" and not isinstance(value, dict):
            raise ValueError(f"{source}: {key} = {value!r}: expected a table [{key}]")
    pad = top.get("gamepad", {})
    if not isinstance(pad, dict):
        raise ValueError(f"{source}: gamepad = {pad!r}: expected a table [gamepad]")
    for key, value in pad.items():
        if key not in allowed["gamepad"]:
            raise ValueError(f"{source}: unknown key 'gamepad.{key}'; [gamepad] holds deadzone, [gamepad.axes] "
                             "and [gamepad.buttons]")  # fmt: skip
        if key != "deadzone" and not isinstance(value, dict):
            raise ValueError(f"{source}: gamepad.{key} = {value!r}: expected a table [gamepad.{key}]")
    out = {**base, "keys": {**base.get("keys", {}), **top.get("keys", {})}}
    if "speed" in top:
        out["speed"] = top["speed"]
    base_pad = base.get("gamepad", {})
    out["gamepad"] = {
        "deadzone": pad.get("deadzone", base_pad.get("deadzone")),
        "axes": {**base_pad.get("axes", {}), **pad.get("axes", {})},
        "buttons": {**base_pad.get("buttons", {}), **pad.get("buttons", {})},
    }
    return out


def _keymap(table: dict, source: str) -> KeyMap:
    moves, speeds, commands = {}, {}, {}
    pad = table.get("gamepad", {})
    sections = [("keys", "", table.get("keys", {}), _CODE, "a KeyboardEvent.code such as KeyW, ArrowUp or Space")]
    sections.append(("gamepad.axes", "axis:", pad.get("axes", {}), _INDEX, "an axis index 0-99"))
    sections.append(("gamepad.buttons", "button:", pad.get("buttons", {}), _INDEX, "a button index 0-99"))
    for section, prefix, entries, pattern, what in sections:
        for name, entry in entries.items():
            where = f"{source}: {section}.{name}"
            if not pattern.match(name):
                raise ValueError(f"{where}: not an input name; expected {what}")
            kind, value = _entry(entry, where, axis=section == "gamepad.axes")
            if kind == "move":
                moves[prefix + name] = value
            elif kind == "speed":
                speeds[prefix + name] = value
            elif kind == "command":
                commands[prefix + name] = value
    speed = table.get("speed", 0.5)
    if not finite_number(speed) or speed <= 0:
        raise ValueError(f"{source}: speed = {speed!r}: expected a number > 0 (what multiplies every move at start)")
    deadzone = pad.get("deadzone", 0.15)
    if not finite_number(deadzone) or not 0 <= deadzone < 1:
        raise ValueError(f"{source}: gamepad.deadzone = {deadzone!r}: expected a number in [0, 1)")
    return KeyMap(moves=moves, speeds=speeds, commands=commands, speed=float(speed), deadzone=float(deadzone))


def _entry(entry, where: str, *, axis: bool) -> tuple[str, object]:
    """One entry as ``(kind, value)``: ``("move", (column, value))``, ``("speed", s)``, ``("command", name)`` or
    ``("none", None)``."""
    move = f'{{ move = "<{"|".join(MOVES)}>", value = <number> }}'
    commands = ", ".join(f'"{c}"' for c in COMMANDS)
    allowed = move if axis else f'{move}, {{ speed = <number> }}, {commands} or "none"'
    if entry == "none":
        return "none", None
    if isinstance(entry, str) and entry in COMMANDS and not axis:
        return "command", entry
    if isinstance(entry, dict) and set(entry) == {"move", "value"}:
        if entry["move"] not in MOVES:
            raise ValueError(f"{where}.move = {entry['move']!r}: allowed values are {', '.join(MOVES)}")
        if not finite_number(entry["value"]):
            raise ValueError(f"{where}.value = {entry['value']!r}: expected a finite number")
        return "move", (MOVES.index(entry["move"]), float(entry["value"]))
    if isinstance(entry, dict) and set(entry) == {"speed"} and not axis:
        if not finite_number(entry["speed"]) or entry["speed"] <= 0:
            raise ValueError(f"{where}.speed = {entry['speed']!r}: expected a number > 0")
        return "speed", float(entry["speed"])
    raise ValueError(f"{where} = {entry!r}: expected {allowed}")


class Inputs:
    """What the pages hold and press, shared between their socket threads and the stepping loop: each page's
    held inputs (input -> magnitude) and the presses (an input newly held that a key map's speed or command
    names, or a page button's command) in order. Thread-safe."""

    def __init__(self, keymap: KeyMap):
        self.keymap = keymap
        self._pressable = {*keymap.speeds, *keymap.commands}
        self._held: dict[object, dict[str, float]] = {}  # per page
        self._presses: list[str] = []
        self._changed = threading.Condition()

    def update(self, page, held: Mapping[str, float]) -> None:
        """Page ``page`` now holds ``held``: inputs newly held that press something are queued."""
        with self._changed:
            before = self._held.get(page, {})
            now = {str(k): float(v) for k, v in held.items()}
            self._presses += [name for name in now if name in self._pressable and name not in before]
            self._held[page] = now
            self._changed.notify_all()

    def command(self, name: str) -> None:
        """A page button's command (one of :data:`COMMANDS`), queued as a press."""
        with self._changed:
            self._presses.append(name)
            self._changed.notify_all()

    def drop(self, page) -> None:
        """Page ``page`` is gone: it holds nothing."""
        with self._changed:
            self._held.pop(page, None)
            self._changed.notify_all()

    def held(self) -> dict[str, float]:
        """Every page's held inputs together (a move held on two pages counts twice)."""
        with self._changed:
            out: dict[str, float] = {}
            for page in self._held.values():
                for name, amount in page.items():
                    out[name] = out.get(name, 0.0) + amount
            return out

    def take(self) -> list[str]:
        """The presses queued since the last call, in order."""
        with self._changed:
            presses, self._presses = self._presses, []
            return presses

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a page's change."""
        with self._changed:
            self._changed.wait(timeout)

"""The key map (forge_gpu/_src/teleop/keys.py): the default's moves, speeds and commands; a file's changes over
it; one-line refusals naming the file, the key and what is allowed; the pages' held inputs and presses."""

import numpy as np
import pytest

from forge_gpu._src.teleop.keys import DEFAULT_FILE, Inputs, load_keymap

LOW, HIGH = [-1.0] * 6 + [0.0], [1.0] * 6 + [0.08]


def test_the_default_map_sums_held_moves_times_the_speed_clipped_to_the_bounds():
    """W and A held at speed 0.5 give dx = dy = 0.5; W twice (two pages) clips at 1; a stick counts its deflection
    past the dead zone; the gripper columns are the bound high (open) or low (closed)."""
    keymap = load_keymap()
    assert keymap.speed == 0.5 and keymap.commands["Enter"] == "start" and keymap.speeds["Digit3"] == 1.0
    np.testing.assert_array_equal(keymap.action({"KeyW": 1, "KeyA": 1}, 0.5, LOW, HIGH, False),
                                  np.float32([0.5, 0.5, 0, 0, 0, 0, 0.08]))  # fmt: skip
    np.testing.assert_array_equal(keymap.action({"KeyW": 2, "KeyR": 1}, 1.0, LOW, HIGH, True),
                                  np.float32([1, 0, 1, 0, 0, 0, 0]))  # fmt: skip
    stick = keymap.action({"axis:1": -0.6, "axis:0": 0.1}, 1.0, LOW, HIGH, False)  # up: +x; 0.1 in the dead zone
    np.testing.assert_allclose(stick, [0.6, 0, 0, 0, 0, 0, 0.08], rtol=1e-6)
    rows = keymap.rows()
    assert rows[0] == {"input": "KeyW", "does": "move x +1"}
    assert {"input": "button:0", "does": "gripper"} in rows


def test_a_file_changes_the_entries_it_names(tmp_path):
    """A file's entry replaces the default's, "none" removes one, the others stay."""
    path = tmp_path / "keys.toml"
    path.write_text('speed = 1.0\n[keys]\nKeyI = { move = "dx", value = 0.5 }\nKeyW = "none"\nKeyP = "keep"\n'
                    '[gamepad]\ndeadzone = 0.3\n[gamepad.buttons]\n"2" = { speed = 0.1 }\n')  # fmt: skip
    keymap = load_keymap(path)
    assert keymap.moves["KeyI"] == (0, 0.5) and "KeyW" not in keymap.moves and keymap.moves["KeyS"] == (0, -1.0)
    assert keymap.commands["KeyP"] == "keep" and keymap.commands["KeyK"] == "keep"
    assert keymap.speed == 1.0 and keymap.deadzone == 0.3 and keymap.speeds["button:2"] == 0.1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[keys]\nKeyW = { move = "dw", value = 1.0 }', r"keys\.KeyW\.move = 'dw': allowed values are dx, dy, dz"),
        ('[keys]\nKeyW = "jump"', r"keys\.KeyW = 'jump': expected \{ move = .*, \{ speed = <number> \}, \"start\""),
        ('[keys]\nkeyw = "keep"', r"keys\.keyw: not an input name; expected a KeyboardEvent\.code such as KeyW"),
        ('[keys]\nKeyW = { move = "dx", value = nan }', r"keys\.KeyW\.value = nan: expected a finite number"),
        ("[keys]\nKeyW = { speed = 0 }", r"keys\.KeyW\.speed = 0: expected a number > 0"),
        ('[gamepad.axes]\n"0" = "keep"', r"gamepad\.axes\.0 = 'keep': expected \{ move = "),
        ('[gamepad.axes]\nx = { move = "dx", value = 1.0 }', r"gamepad\.axes\.x: not an input name; expected an axis"),
        ("[gamepad]\ndeadzone = 1.5", r"gamepad\.deadzone = 1\.5: expected a number in \[0, 1\)"),
        ("speed = -1", r"speed = -1: expected a number > 0"),
        ("[mouse]\nx = 1", r"unknown key 'mouse'; a key map holds speed, \[keys\] and \[gamepad\]"),
        ("[gamepad]\nrumble = 1", r"unknown key 'gamepad\.rumble'"),
        ("[keys", r"not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_naming_the_file_and_the_key(tmp_path, text, message):
    """Each bad entry: ValueError in one line starting with the file's path."""
    path = tmp_path / "keys.toml"
    path.write_text(text + "\n")
    with pytest.raises(ValueError, match=message) as caught:
        load_keymap(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_a_missing_file_is_refused():
    """A key map file that is not there: one line naming it."""
    with pytest.raises(ValueError, match=r"no-such\.toml: cannot read the key map"):
        load_keymap("no-such.toml")
    assert DEFAULT_FILE.is_file()


def test_inputs_queue_the_presses_of_newly_held_inputs_and_sum_the_pages():
    """A command or speed input counts once when it becomes held, not while it stays held; moves held on two pages
    add up; a page gone holds nothing; a button's command is queued as it comes."""
    inputs = Inputs(load_keymap())
    inputs.update("a", {"Enter": 1, "KeyW": 1})
    inputs.update("a", {"Enter": 1, "KeyW": 1, "Digit1": 1})
    inputs.update("b", {"KeyW": 1})
    inputs.command("keep")
    assert inputs.take() == ["Enter", "Digit1", "keep"] and inputs.take() == []
    assert inputs.held() == {"Enter": 1.0, "KeyW": 2.0, "Digit1": 1.0}
    inputs.drop("a")
    assert inputs.held() == {"KeyW": 1.0}

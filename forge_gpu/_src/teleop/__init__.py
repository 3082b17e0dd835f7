"""Teleoperation: a person drives one world of a task from a browser (``forge-gpu teleop``), and the episodes they
keep are recorded as a run. ``keys`` (the key map: keyboard and gamepad inputs to the end-effector action, the
default table and a file's changes), ``session`` (the one world stepped, its episode held until kept or discarded,
the kept ones appended to the run's recorder), ``server`` (the local page and its socket: the token, the origin
check, the frames and the inputs) and ``page/`` (the page itself: plain HTML, CSS and JavaScript, shipped with the
package)."""

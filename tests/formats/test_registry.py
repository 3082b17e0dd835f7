"""A run format registered from outside the package needs one class and one ``register_format`` call.

``ListFormat``, a test double keeping a run's episodes in one pickle file, is registered for this module only;
recording, reading, inspect, convert, repair and the command line then take it, with no library code edited.
"""

import ast
import dataclasses
import importlib.util
import os
import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, make_description, record

import forge_gpu
from forge_gpu._src.core.files import write_json_atomic
from forge_gpu._src.core.frames import stack_episodes
from forge_gpu._src.core.manifest import RUN_MANIFEST, initial_manifest
from forge_gpu._src.formats import registry as formats
from forge_gpu._src.recording.base import RecorderBase
from forge_gpu._src.recording.tracker import EpisodeTracker
from forge_gpu.cli import build_parser, main
from forge_gpu.curation import convert_run, repair_run
from forge_gpu.formats import FormatCapabilities, read_manifest
from forge_gpu.reading import Episode, EpisodeReadOptions, inspect_run, read_episodes
from forge_gpu.recording import PackedRecorder, Recorder, make_recorder

FILE = "episodes.pkl"
MEMBERS = ("action", "reward", "terminated", "truncated")


def dump(directory, episodes):
    """Pickle a list of Episodes to FILE through a .tmp; return its size."""
    path = os.path.join(directory, FILE)
    with open(path + ".tmp", "wb") as f:
        pickle.dump(episodes, f)
    os.replace(path + ".tmp", path)
    return os.path.getsize(path)


class ListRecorder(RecorderBase):
    """Keeps every checked batch in memory; writes the ended episodes to FILE at close."""

    def __init__(self, directory, run, options):
        tracker = EpisodeTracker(run.spec, run.num_envs, run.max_steps)
        manifest = initial_manifest(run, options.max_buffer_bytes or 1 << 20, ListFormat.identity)
        self._batches, self._ended = [], []  # member -> [N, ...] per batch; (env, first, last batch)
        self._first = np.zeros(run.num_envs, np.int64)  # each env's reset batch
        super().__init__(directory, tracker, manifest)

    @property
    def backlog(self):
        return 0

    def append(self, observation, result):
        self._raise_if_unusable()
        active, reward, terminated, truncated, action = self._tracker.check(observation, result)
        ended = self._tracker.commit(observation, active, terminated, truncated)
        b = len(self._batches)
        arrays = {f"obs/{f}": a for f, a in observation.items()} | dict(
            zip(MEMBERS, (action, reward, terminated, truncated), strict=True)
        )
        self._batches.append({m: np.array(a) for m, a in arrays.items()})
        self._first[~active] = b
        self._ended += [(int(e), int(self._first[e]), b) for e in ended]

    def close(self, error=None):
        if not self._closed:
            episodes = []
            if self._ended:
                stacked = {m: np.stack([batch[m] for batch in self._batches]) for m in self._batches[0]}
                path = os.path.join(self._directory, FILE)
                episodes = [cut(stacked, path, *ended) for ended in self._ended]
            nbytes = dump(self._directory, episodes)
            with self._cond:
                self._add_published(len(episodes), sum(e.steps for e in episodes), nbytes)
        super().close(error)

    def _busy(self):
        return False

    def _join(self):
        pass

    def _unwritten(self):
        return []


def cut(stacked, path, env, first, last):
    """Env ``env``'s episode from its reset batch ``first`` to its ending batch ``last``."""
    frames = {m[4:]: a[first : last + 1, env] for m, a in stacked.items() if m.startswith("obs/")}
    return Episode(
        env_id=env,
        episode_id=int(frames["episode_id"][0]),
        steps=last - first,
        obs={f: a[:-1] for f, a in frames.items()},
        next={f: a[1:] for f, a in frames.items()},
        **{m: stacked[m][first + 1 : last + 1, env] for m in MEMBERS},
        path=path,
    )


class ListReader:
    """A RunReader of FILE (none yet: no episodes)."""

    def __init__(self, run_dir, manifest):
        self.directory, self.manifest = run_dir, manifest
        self.path = os.path.join(run_dir, FILE)
        self.episodes = []
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                self.episodes = pickle.load(f)

    def __len__(self):
        return len(self.episodes)

    def ids(self, k):
        e = self.episodes[k]
        return e.env_id, e.episode_id, e.steps

    def instructions(self):
        return [e.instruction for e in self.episodes]

    def read(self, ks, options):
        for e in (self.episodes[k] for k in ks):
            keys = list(e.obs) if options.observation_keys is None else options.observation_keys
            obs, nxt = {f: e.obs[f] for f in keys}, {f: e.next[f] for f in keys}
            yield dataclasses.replace(e, obs=obs, next=nxt, path=self.path)

    def check_read(self, options, *, mmap=False):
        if mmap:
            raise ValueError(f"{self.directory}: cannot be memory-mapped; forge-gpu convert it --to packed")

    def frame_table(self, ks, options, *, mmap=False):
        self.check_read(options, mmap=mmap)
        fields, columns, episodes = stack_episodes(list(self.read(ks, options)))
        return fields, [(0, columns)], episodes

    def verify(self):
        """Every episode read back (the pickle holds no checksums)."""
        episodes = sum(1 for _ in self.read(list(range(len(self))), EpisodeReadOptions()))
        return {"checksums": False, "blocks": 0, "episodes": episodes, "bytes": 0, "dropped": 0} | {
            "bad_blocks": [],
            "bad_episodes": [],
            "error": None,
        }


class ListFormat:
    """The test double format: every episode of a run in one pickled list."""

    name = "pickled_test"
    capabilities = FormatCapabilities(compressions=("none",))
    identity = {"schema_version": 9001, "layout": "pickled_test"}
    published_by = "episode list"

    def __getattr__(self, name):
        """Only missing attributes land here: a caller that probes one (getattr with a default, hasattr) fails
        every test of this module that goes through it, instead of quietly taking a default."""
        raise AssertionError(f"a caller probed the format's attribute {name!r}; formats declare capabilities")

    def owns(self, manifest):
        return all(manifest.get(k) == v for k, v in self.identity.items())

    def recorder(self, directory, run, options):
        return ListRecorder(directory, run, options)

    def open(self, run_dir, manifest):
        return ListReader(run_dir, manifest)

    def repair(self, run_dir, manifest):
        return {"removed": [], "actions": [], "recovered_episodes": 0}  # repair_run removes the *.tmp it may leave

    def write(self, directory, episodes, compression):
        stored = list(episodes)
        dump(directory, stored)
        return len(stored), dict(self.identity)


@pytest.fixture(scope="module", autouse=True)
def registered():
    """ListFormat in the registry for this module's tests only."""
    fmt = forge_gpu.formats.register_format(ListFormat())
    yield fmt
    del formats.FORMATS[fmt.name]


def simulate(num_envs=3, max_steps=6, steps=30, seed=3):
    """A run description, its simulation and the batches it made (one mid-run reset)."""
    run = make_description(num_envs, max_steps, images=True)
    sim = SyntheticSim(run, seed=seed, end_prob=0.3)
    return run, sim, make_batches(sim, steps, resets_at=(11,))


def members(directory, **options):
    """A run's episodes by (env_id, episode_id), each as member -> array like ``SyntheticSim.completed``."""
    read = read_episodes(directory, options=EpisodeReadOptions(**options))
    return {
        (e.env_id, e.episode_id): {f"{p}/{f}": a for p in ("obs", "next") for f, a in getattr(e, p).items()}
        | {m: getattr(e, m) for m in MEMBERS}
        for e in read
    }


def assert_same(a, b):
    """Two {id: {member: array}} maps hold the same episodes, bit for bit, dtypes included."""
    assert a.keys() == b.keys() and a
    for key, episode in a.items():
        assert episode.keys() == b[key].keys(), key
        for m, x in episode.items():
            assert x.dtype == b[key][m].dtype and np.array_equal(x, b[key][m]), (key, m)


def record_list(directory):
    """Record a simulated run in the double's format through make_recorder; return the simulation."""
    run, sim, batches = simulate()
    recorder = make_recorder(str(directory), run, forge_gpu.recording.RecordingOptions(format="pickled_test"))
    assert isinstance(recorder, Recorder)
    for observation, result in batches:
        recorder.append(observation, result)
    recorder.close()
    return sim


def test_register_format_refuses_an_incomplete_a_duplicate_or_a_clashing_format():
    """Missing members, a taken name, an identity a built-in owns and one without a schema_version are refused;
    FORMATS is unchanged."""
    before = dict(formats.FORMATS)

    class Clashing(ListFormat):
        name = "clashing_test"
        identity = {"schema_version": 2, "layout": "packed"}

    with pytest.raises(TypeError, match="RunFormat"):
        forge_gpu.formats.register_format(object())
    with pytest.raises(ValueError, match="'pickled_test' is already registered"):
        forge_gpu.formats.register_format(ListFormat())
    with pytest.raises(ValueError, match="'clashing_test'.*clashes with format 'packed'"):
        forge_gpu.formats.register_format(Clashing())

    class Unversioned(ListFormat):
        name = "unversioned_test"
        identity = ["layout", "unversioned_test"]

    with pytest.raises(ValueError, match="'unversioned_test': identity must hold an integer schema_version"):
        forge_gpu.formats.register_format(Unversioned())
    assert formats.FORMATS == before


def test_a_registered_format_records_reads_and_inspects(tmp_path):
    """RecordingOptions takes the format (and refuses a compression it lacks); its run reads back as simulated."""
    with pytest.raises(ValueError, match="compression.*pickled_test format takes none"):
        forge_gpu.recording.RecordingOptions(format="pickled_test", compression="lz4")
    sim = record_list(tmp_path / "run")
    assert_same(members(tmp_path / "run"), sim.completed)
    projected = members(tmp_path / "run", observation_keys=["proprio"])
    assert all(e.keys() == {"obs/proprio", "next/proprio", *MEMBERS} for e in projected.values())
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "closed" and manifest["completed_episodes"] == len(sim.completed)
    assert {k: manifest[k] for k in ListFormat.identity} == ListFormat.identity
    report = inspect_run(tmp_path / "run")
    assert report["format"] == "pickled_test" and report["episodes"] == len(sim.completed)
    assert inspect_run(tmp_path / "run", quick=True)["checked"] == "episode list"


def test_convert_from_packed_to_the_format_and_on_to_npz_keeps_every_bit(tmp_path):
    """packed -> pickled_test -> npz: each run's episodes equal the previous run's, dtypes included."""
    run, sim, batches = simulate(seed=5)
    record(tmp_path / "packed", run, batches, recorder=PackedRecorder)
    convert_run(tmp_path / "packed", tmp_path / "list", to="pickled_test")
    convert_run(tmp_path / "list", tmp_path / "npz", to="npz")
    packed, listed, npz = (members(tmp_path / name) for name in ("packed", "list", "npz"))
    assert_same(packed, sim.completed)
    assert_same(packed, listed)
    assert_same(listed, npz)
    assert inspect_run(tmp_path / "list")["format"] == "pickled_test"


def test_repair_closes_a_run_of_the_format_and_keeps_its_episodes(tmp_path):
    """A run left at status recording with a stray .tmp is closed, the .tmp removed, every episode kept."""
    directory = tmp_path / "run"
    sim = record_list(directory)
    manifest = read_manifest(directory)
    write_json_atomic(directory / RUN_MANIFEST, {**manifest, "status": "recording", "completed_episodes": 0})
    (directory / "x.tmp").write_bytes(b"torn")
    report = repair_run(directory)
    assert report["status_before"] == "recording" and report["removed"] == ["x.tmp"]
    assert report["episodes"] == len(sim.completed) and not (directory / "x.tmp").exists()
    repaired = read_manifest(directory)
    assert repaired["status"] == "closed" and repaired["completed_episodes"] == len(sim.completed)
    assert "episode list" in repaired["repaired"]["note"]
    assert_same(members(directory), sim.completed)


def test_the_command_line_offers_a_registered_format(tmp_path, capsys):
    """A parser built after registration takes --to pickled_test, and convert writes such a run."""
    args = build_parser().parse_args(["convert", "a", "b", "--to", "pickled_test"])
    assert args.to == "pickled_test"
    run, sim, batches = simulate(seed=9)
    record(tmp_path / "npz", run, batches)
    assert main(["convert", str(tmp_path / "npz"), str(tmp_path / "list"), "--to", "pickled_test"]) == 0
    assert f"wrote {len(sim.completed)} episodes" in capsys.readouterr().out
    assert_same(members(tmp_path / "list"), members(tmp_path / "npz"))


def test_windows_read_a_registered_format_through_its_frame_table(tmp_path):
    """Windows over the double's run (its reader's frame_table) equal Windows over its npz copy; mmap=True is
    refused with the reader's own message."""
    record_list(tmp_path / "list")
    convert_run(tmp_path / "list", tmp_path / "npz", to="npz")
    listed, npz = (forge_gpu.reading.Windows(tmp_path / name, history=2, horizon=3) for name in ("list", "npz"))
    assert len(listed) == len(npz) > 0
    a, b = (w.batch(np.arange(len(w))) for w in (listed, npz))  # the same windows, in each run's episode order
    order = [np.lexsort((w["t"], w["episode_id"], w["env_id"])) for w in (a, b)]
    assert a.keys() == b.keys()
    for key in a.keys() - {"instruction"}:
        x, y = a[key][order[0]], b[key][order[1]]
        assert x.dtype == y.dtype and np.array_equal(x, y), key
    with pytest.raises(ValueError, match="cannot be memory-mapped"):
        forge_gpu.reading.Windows(tmp_path / "list", mmap=True)
    if importlib.util.find_spec("torch"):  # a torch dataset asks the reader where it is made, not in a worker
        with pytest.raises(ValueError, match="cannot be memory-mapped"):
            forge_gpu.reading.WindowMapDataset(tmp_path / "list", mmap=True)


def test_capabilities_are_declared_and_read_not_probed(tmp_path):
    """The double declares no codecs and no salvage: RecordingOptions refuses codecs for it, repair_run refuses to
    salvage its run (and changes nothing), both in one line naming the format; a bad declaration is refused."""
    with pytest.raises(ValueError, match="codecs apply to the packed format, not pickled_test"):
        forge_gpu.recording.RecordingOptions(format="pickled_test", codecs={"rgb": "jpeg:90"})
    directory = tmp_path / "run"
    record_list(directory)
    before = sorted(os.listdir(directory)), (directory / RUN_MANIFEST).read_bytes()
    with pytest.raises(ValueError, match="the pickled_test format cannot salvage a run"):
        repair_run(directory, salvage=True)
    assert (sorted(os.listdir(directory)), (directory / RUN_MANIFEST).read_bytes()) == before
    for bad, match in [
        ({"compressions": ()}, "at least one compression"),
        ({"compressions": "none"}, "compressions='none': must be a tuple of names"),
        ({"compressions": ("none",), "durabilities": ("machine",)}, "durabilities=.*'process'"),
        ({"compressions": ("none",), "salvage": 1}, "salvage=1: must be True or False"),
    ]:
        with pytest.raises(ValueError, match=match):
            FormatCapabilities(**bad)

    class Undeclared(ListFormat):
        name = "undeclared_test"
        identity = {"schema_version": 9002}
        capabilities = ("none",)

    with pytest.raises(ValueError, match="'undeclared_test': capabilities must be a FormatCapabilities"):
        forge_gpu.formats.register_format(Undeclared())


def test_verify_is_the_formats_own_and_reached_through_the_registry_alone(tmp_path, capsys):
    """verify_run checks a run of a registered format through its reader's verify (here every episode read, no
    blocks, as the format declares), and the module behind it imports nothing of a format's implementation."""
    sim = record_list(tmp_path / "run")
    run = forge_gpu.reading.verify_run(tmp_path / "run")["runs"][0]
    assert run["ok"] and run["format"] == "pickled_test" and run["episodes"] == len(sim.completed)
    assert run["blocks"] == 0 and not run["checksums"] and set(formats.VERIFY_KEYS) <= run.keys()
    assert main(["verify", str(tmp_path / "run")]) == 0
    assert "blocks" not in capsys.readouterr().out
    source = Path(sys.modules[forge_gpu.reading.verify_run.__module__].__file__).read_text()
    imported = [
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("forge_gpu._src.formats")
    ]
    assert imported == ["forge_gpu._src.formats.registry"]


PACKAGE = Path(forge_gpu.__file__).parent
FORMAT_EXPRESSION = re.compile(r"\bfmt\b|format|FORMATS|Format\b")


def format_probes(source: str, name: str) -> list[str]:
    """Where ``source`` probes a format: ``getattr``/``hasattr`` on an expression naming one (``fmt``, ``format``,
    ``FORMATS[...]``, a ``*Format``), or ``inspect.signature`` of one's methods (read, never inspected); a user's policy
    factory is no format: its signature is checked before it is called."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        named = node.args and FORMAT_EXPRESSION.search(ast.unparse(node.args[0]))
        if named and (func in ("getattr", "hasattr") or func.split(".")[-1] == "signature"):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_caller_probes_a_format():
    """No module of forge_gpu tests a format's attributes or signatures; the scan finds a planted probe of each kind."""
    found = [p for path in sorted(PACKAGE.rglob("*.py")) for p in format_probes(path.read_text(), str(path))]
    assert not found, "\n".join(found)
    planted = (
        "getattr(fmt, 'salvage', False)\nhasattr(FORMATS[name], 'codecs')\ninspect.signature(fmt.repair)\n"
        "inspect.signature(factory)\n"
    )
    assert [p.split(": ", 1)[1] for p in format_probes(planted, "planted")] == [
        "getattr(fmt, 'salvage', False)",
        "hasattr(FORMATS[name], 'codecs')",
        "inspect.signature(fmt.repair)",
    ]

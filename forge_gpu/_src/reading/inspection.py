"""Summaries and drawings of a run directory, for ``forge-gpu inspect`` and ``forge-gpu render``.

Data side: numpy, the reader, and matplotlib (imported when drawing).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from forge_gpu._src.core.cameras import MOUNT_KEY, cameras, frame_layout, image_fields
from forge_gpu._src.core.codec_specs import RAW, CodecSpec
from forge_gpu._src.core.dataset import is_dataset, read_dataset_manifest
from forge_gpu._src.core.episode import EpisodeReadOptions, episode_return, episode_stem, episode_succeeded
from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.packed import identity as packed_identity
from forge_gpu._src.formats.registry import format_of
from forge_gpu._src.reading.runs import open_run


def _stats(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "min": None, "max": None}
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "min": float(a.min()), "max": float(a.max())}


def inspect_run(run_dir: str | os.PathLike, *, quick: bool = False) -> dict:
    """Check a run and summarise it. ``quick`` checks the manifest and markers only.

    Raises ``ValueError`` naming the offending file and the broken rule. Given a dataset root, returns
    :func:`inspect_dataset`'s report.
    """
    run_dir = os.fspath(run_dir)
    if is_dataset(run_dir):
        return inspect_dataset(run_dir, quick=quick)
    run = open_run(run_dir)
    manifest = run.manifest
    lengths = [run.ids(k)[2] for k in range(len(run))]
    returns: list[float] = []
    params: dict[str, list] = {}
    successes = 0
    if not quick:
        for episode in run.read(list(range(len(run))), EpisodeReadOptions()):
            returns.append(episode_return(episode))
            successes += episode_succeeded(episode, manifest["env_spec"])
            for name, value in episode.params.items():
                params.setdefault(name, []).append(value)
    spec = manifest["env_spec"]
    fmt = format_of(manifest)
    bytes_on_disk = sum(f.stat().st_size for f in Path(run_dir).iterdir() if f.is_file())
    report = {
        "run": run_dir,
        "status": manifest["status"],
        "task": manifest["task"],
        "run_id": manifest["run_id"],
        "format": fmt.name,
        "checked": fmt.published_by if quick else "all episodes",
        "episodes": len(run),
        "transitions": int(sum(lengths)),
        "episode_length": _stats(lengths),
        "episode_return": None if quick else _stats(returns),
        "success_rate": None,
        "fields": _fields(spec, manifest, name=os.path.join(run_dir, RUN_MANIFEST)),
        "cameras": run_cameras(manifest),
        "state": spec.get("state", {}),
        "params": None if quick else {name: _param_stats(values) for name, values in params.items()},
        "action_shape": spec["action_shape"],
        "bytes_on_disk": bytes_on_disk,
        "incomplete_episodes": manifest.get("incomplete_episodes", []),
        "success_scope": None if quick else success_scope(manifest, len(run)),
        "checksums": _checksums(fmt.name, manifest),
        "instructions": instruction_counts(Counter(run.instructions())),
    }
    report["statistics"] = _statistics(run_dir)
    if spec.get("has_success") and not quick and len(run):
        report["success_rate"] = successes / len(run)
    if manifest["status"] == "recording":
        report["note"] = (
            "the run was not closed: it is still being recorded, or its process was killed; "
            f"if it was killed, run: forge-gpu repair {run_dir}"
        )
    return report


def run_cameras(manifest: dict) -> dict[str, dict]:
    """Each camera of a run (``core/cameras.py``): name -> its fields (``rgb``, ``depth`` or None) and how it is
    placed (``fixed``, ``follows a body``, ``mounted on BODY``: its calibration's say)."""
    layout = observation_layout(manifest["env_spec"])
    calibration = manifest.get("calibration") or {}
    entries = calibration.get("cameras") if isinstance(calibration, dict) else None
    out = {}
    for name, fields in cameras(layout).items():
        entry = (entries or {}).get(name) or {}
        if MOUNT_KEY in entry:
            placed = f"mounted on {entry[MOUNT_KEY].get('body')}"
        elif "follows" in entry:
            placed = "follows a body"
        else:
            placed = "fixed" if entry else "no calibration"
        out[name] = {**fields, "placed": placed}
    return out


def success_scope(manifest: dict, published: int) -> str | None:
    """For a run ``collect`` stopped at a number of episodes (run.json's ``episodes_target``) that left episodes
    running, of a task with success: the line that says its success rate counts the ``published`` episodes only,
    with the share left running, and the command that gives an unbiased rate; None otherwise."""
    target = manifest.get("episodes_target")
    running = len(manifest.get("incomplete_episodes", []))
    if target is None or not running or not manifest["env_spec"].get("has_success"):
        return None
    share = running / (published + running)
    return (
        f"the success rate counts the {published} published episodes only: collection stopped once {target} had "
        f"ended and left {running} running ({share:.1%} of the episodes begun), mostly the slow ones, often "
        f"failures, so it can over-rate the policy; for an unbiased rate: "
        f"forge-gpu evaluate {manifest['task']} --policy POLICY --episodes {target}"
    )


def _fields(spec: dict, manifest: dict, *, name: str) -> dict:
    """Each observation field's entry of env_spec, with ``codec``: how its frames are stored (run.json's ``codecs``
    entry for its column, every parameter written out; ``{"codec": "none"}`` for a field stored raw)."""
    stored = manifest.get("codecs", {})
    if not isinstance(stored, dict):
        raise ValueError(f"{name}: codecs must be a dict of column -> codec, got {stored!r}")
    out = {}
    for field, entry in spec.get("observation", {}).items():
        column = f"obs/{field}"
        codec = CodecSpec.from_json(stored[column], name=f"{name}: codecs[{column!r}]") if column in stored else None
        out[field] = {**entry, "codec": (codec or CodecSpec(RAW)).to_json()}
    return out


def instruction_counts(counts: Counter) -> dict[str, int]:
    """The distinct instructions and how many episodes have each (``counts``), the most common first, then by text."""
    return {text: counts[text] for text in sorted(counts, key=lambda text: (-counts[text], text))}


def _checksums(format_name: str, manifest: dict) -> str:
    """What guards the run's bytes against damage, and whether reading checked it."""
    if format_name == "npz":
        return "CRC-32 of every zip member, checked as read"
    if format_name != "packed":
        return "the format's own"
    version = manifest.get("layout_version", 1)
    if version >= packed_identity.CHECKSUMS_VERSION:
        return "CRC32C of every block, verified before it is read"
    return f"none (layout_version {version}): read unverified; forge-gpu verify checks the episodes' rules"


def _param_stats(values: list[np.ndarray]) -> dict:
    """A param's shape and its min, mean and max over the episodes (per component, of the param's shape)."""
    a = np.stack(values).astype(np.float64)
    figures = {"min": a.min(axis=0), "mean": a.mean(axis=0), "max": a.max(axis=0)}
    return {"shape": list(a.shape[1:]), **{k: v.tolist() for k, v in figures.items()}}


def _statistics(run_dir: str) -> dict | None:
    """The run's stored normalization statistics as plain lists, or None when it has none."""
    from forge_gpu._src.recording.stats import load_statistics

    try:
        summary = load_statistics(run_dir).summary()
    except LookupError:
        return None
    return {key: {f: v if f == "count" else v.tolist() for f, v in figures.items()} for key, figures in summary.items()}


def inspect_dataset(root: str | os.PathLike, *, quick: bool = False) -> dict:
    """Check every run of a dataset root and summarise each one (``inspect_run``) and the whole."""
    root = os.fspath(root)
    manifest = read_dataset_manifest(root)
    runs = []
    for entry in manifest["runs"]:
        report = inspect_run(os.path.join(root, entry["path"]), quick=quick)
        report["worker"] = entry.get("worker")
        report["collection_status"] = entry.get("status")
        report["error"] = entry.get("error")
        runs.append(report)
    episodes = sum(r["episodes"] for r in runs)
    transitions = sum(r["transitions"] for r in runs)
    return {
        "kind": "dataset",
        "dataset": root,
        "checked": " and ".join(sorted({r["checked"] for r in runs})) or ("index" if quick else "all episodes"),
        "runs": runs,
        "failed_workers": manifest.get("failed_workers", []),
        "total": {
            "runs": len(runs),
            "episodes": episodes,
            "transitions": transitions,
            "mean_episode_length": transitions / episodes if episodes else None,
            "bytes_on_disk": sum(r["bytes_on_disk"] for r in runs),
            "incomplete_episodes": sum(len(r["incomplete_episodes"]) for r in runs),
            "instructions": instruction_counts(sum((Counter(r["instructions"]) for r in runs), Counter())),
        },
    }


def _format_dataset_report(report: dict) -> str:
    total = report["total"]
    lines = [f"dataset        {report['dataset']}   checked {report['checked']}", "runs:"]
    for r in report["runs"]:
        line = (
            f"  {os.path.basename(r['run'])}  {r['task']}  {r['collection_status'] or r['status']}  "
            f"episodes {r['episodes']}  transitions {r['transitions']}  bytes {r['bytes_on_disk']:,}"
        )
        lines.append(line + (f"  error: {r['error']}" if r["error"] else ""))
    lines += [f"  worker {f['worker']} made no run: {f['error']}" for f in report["failed_workers"]]
    mean = total["mean_episode_length"]
    lines += [
        f"total          {total['runs']} runs   episodes {total['episodes']}   transitions {total['transitions']}",
        f"mean length    {'n/a' if mean is None else f'{mean:.4g}'}",
        f"bytes on disk  {total['bytes_on_disk']:,}",
        f"incomplete     {total['incomplete_episodes']} episodes (never published)",
        *_instruction_lines(total["instructions"]),
    ]
    return "\n".join(lines)


def _instruction_lines(counts: dict[str, int]) -> list[str]:
    """The report's instructions: one line per distinct one, with its episode count."""
    width = len(str(max(counts.values(), default=0)))
    return [f"instructions   {len(counts)} distinct"] + [f"  {n:>{width}}  {text}" for text, n in counts.items()]


def format_report(report: dict) -> str:
    """A readable summary of :func:`inspect_run`'s (or :func:`inspect_dataset`'s) report."""
    if report.get("kind") == "dataset":
        return _format_dataset_report(report)

    def stat(s):
        if not s or s["mean"] is None:
            return "n/a"
        return f"mean {s['mean']:.4g}  min {s['min']:.4g}  max {s['max']:.4g}"

    rate = report["success_rate"]
    success = "n/a" if rate is None else f"{rate:.1%}"
    lines = [
        f"run            {report['run']}",
        f"task           {report['task']}   status {report['status']}   checked {report['checked']}",
        f"format         {report['format']}",
        f"episodes       {report['episodes']}   transitions {report['transitions']}",
        f"length         {stat(report['episode_length'])}",
        f"return         {stat(report['episode_return'])}",
        f"success rate   {success}",
        *([f"  ({report['success_scope']})"] if report.get("success_scope") else []),
        f"bytes on disk  {report['bytes_on_disk']:,}",
        f"checksums      {report['checksums']}",
        f"incomplete     {len(report['incomplete_episodes'])} episodes (never published)",
        f"action         {report['action_shape']}",
        *_instruction_lines(report["instructions"]),
        "fields:",
    ]
    lines += [
        f"  {name:<12} {d.get('shape')} {d.get('dtype')}  codec {CodecSpec.from_json(d['codec'], name=name)}"
        for name, d in report["fields"].items()
    ]
    if report.get("cameras"):
        lines.append("cameras:")
        lines += [
            f"  {name:<12} {', '.join(f for f in (c['rgb'], c['depth']) if f)}  {c['placed']}"
            for name, c in report["cameras"].items()
        ]
    if report.get("state"):
        lines.append("state (every frame):")
        lines += [f"  {name:<12} {d.get('shape')} {d.get('dtype')}" for name, d in report["state"].items()]
    if report.get("params"):
        lines.append("params (per episode, over the episodes):")
        lines += [
            f"  {name:<12} {p['shape']}  min {_figure(p['min'])}  mean {_figure(p['mean'])}  max {_figure(p['max'])}"
            for name, p in report["params"].items()
        ]
    if report.get("statistics") is None:
        lines.append("statistics: none stored (recorded before statistics existed); run: forge-gpu stats RUN")
    else:
        lines.append("statistics (per channel; q01/q99 within 0.4%):")
        lines += format_statistics(report["statistics"])
    if "note" in report:
        lines.append(f"note: {report['note']}")
    return "\n".join(lines)


def _figure(value) -> str:
    """A param's figure (a number, or nested lists of numbers) as text: 4 significant digits, 4 decimals in lists."""
    return np.array2string(np.asarray(value), precision=4, separator=", ") if np.ndim(value) else f"{value:.4g}"


def no_frames(episode) -> str | None:
    """Why ``episode`` has no camera frames to draw (its run stores no camera image, ``rgb`` or a named camera's
    ``NAME_rgb``: recorded with ``params.render = false`` or its cameras off; or every frame of every camera is
    zero: such a run of an older forge_gpu), or None when it has some."""
    images = image_fields(frame_layout(episode.obs))
    if not images:
        return "the run stores no camera frames (no rgb field: a task without a camera, or params.render = false)"
    if not any(episode.obs[f].any() or episode.next[f].any() for f in images):
        return "the run's rgb frames are all zero (recorded with params.render = false by an older forge_gpu)"
    return None


def camera_strip(episode) -> np.ndarray:
    """Every frame of an episode's cameras side by side, [T + 1, H, W, 3] uint8: each camera's image in the run's
    order, the shorter ones padded below with black to the tallest."""
    frames = [np.concatenate([episode.obs[f], episode.next[f][-1:]]) for f in image_fields(frame_layout(episode.obs))]
    height = max(f.shape[1] for f in frames)
    padded = [np.pad(f, ((0, 0), (0, height - f.shape[1]), (0, 0), (0, 0))) for f in frames]
    return np.concatenate(padded, axis=2)


def render_episode(
    run_dir: str | os.PathLike, *, episode: tuple[int, int] | None = None, out=None, draw=None
) -> tuple[Path, str]:
    """Draw one episode: a GIF of its cameras' frames side by side (:func:`camera_strip`); when it has none
    (:func:`no_frames`), the frames ``draw((env_id, episode_id))`` returns (uint8 ``[T + 1, H, W, 3]``: the
    command line draws the robot from the recorded state, which needs the simulator) as a GIF, or, without
    ``draw``, a PNG plot of proprio, actions and reward. Returns the path and what it drew (``"frames"``,
    ``"drawn"`` or why there are none).

    Raises ``LookupError`` when the episode is not in the run.
    """
    run_dir = os.fspath(run_dir)
    run = open_run(run_dir)
    chosen = None
    for k in range(len(run)):
        if episode is None or run.ids(k)[:2] == tuple(episode):
            chosen = k
            break
    if chosen is None:
        what = f"episode {episode[0]}:{episode[1]}" if episode else "episode"
        some = ", ".join("{}:{}".format(*run.ids(k)[:2]) for k in range(min(5, len(run))))
        raise LookupError(f"{run_dir} holds no published {what}" + (f"; it holds {some}, ..." if some else ""))
    ep = next(run.read([chosen], EpisodeReadOptions()))
    stem = episode_stem(ep.env_id, ep.episode_id)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    missing = no_frames(ep)
    if missing is None or draw is not None:
        from PIL import Image

        frames = camera_strip(ep) if missing is None else draw((ep.env_id, ep.episode_id))
        out = Path(out or Path(run_dir).parent / f"{Path(run_dir).name}-{stem}.gif")
        out.parent.mkdir(parents=True, exist_ok=True)
        images = [Image.fromarray(f) for f in frames]
        images[0].save(out, save_all=True, append_images=images[1:], duration=40, loop=0)
        return out, "frames" if missing is None else "drawn"
    out = Path(out or Path(run_dir).parent / f"{Path(run_dir).name}-{stem}.png")
    t = ep.obs["time"]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    axes[0].plot(t, ep.obs["proprio"])
    axes[0].set_ylabel("proprio")
    axes[1].plot(t, ep.action)
    axes[1].set_ylabel("action")
    axes[2].plot(t, ep.reward)
    axes[2].set_ylabel("reward")
    axes[2].set_xlabel("time [s]")
    fig.suptitle(f"{stem}: {ep.steps} steps")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out, missing


def format_statistics(summary: dict[str, dict]) -> list[str]:
    """Readable lines: one per key, with each figure shown per channel (at most 6 channels)."""

    def show(values) -> str:
        values = np.atleast_1d(values)
        text = " ".join(f"{v:.4g}" for v in values[:6])
        return f"[{text}{' ...' if values.size > 6 else ''}]"

    lines = []
    for key, s in summary.items():
        lines.append(
            f"  {key:<12} count {s['count']:,}  mean {show(s['mean'])}  std {show(s['std'])}  "
            f"min {show(s['min'])}  max {show(s['max'])}  q01 {show(s['q01'])}  q99 {show(s['q99'])}"
        )
    return lines

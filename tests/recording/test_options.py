"""RecordingOptions: one frozen value, checked once, with errors naming the field, the value and what is allowed."""

import dataclasses

import pytest

from forge_gpu._src.formats.registry import OptionError, recording_options
from forge_gpu.recording import NpzRecorder, PackedRecorder, RecordingOptions, make_recorder


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"format": "hdf5"}, ["format='hdf5'", "packed, npz"]),
        ({"compression": "deflate"}, ["compression='deflate'", "packed format takes none, lz4, zstd"]),
        ({"format": "npz", "compression": "zstd"}, ["compression='zstd'", "npz format takes none, deflate"]),
        ({"compression_level": 10}, ["compression_level=10", "[0, 9]"]),
        ({"writers": 0}, ["writers=0", ">= 1"]),
        ({"writers": True}, ["writers=True", "integer"]),
        ({"max_buffer_bytes": -1}, ["max_buffer_bytes=-1", ">= 1"]),
        ({"statistics": "yes"}, ["statistics='yes'", "True or False"]),
    ],
)
def test_bad_options_are_refused_naming_value_and_allowed(fields, words):
    """Each bad field raises OptionError (a ValueError) whose message names the field, its value and what is allowed."""
    with pytest.raises(OptionError) as caught:
        RecordingOptions(**fields)
    assert isinstance(caught.value, ValueError)
    for word in words:
        assert word in str(caught.value)


def test_options_are_frozen_keyword_only_and_overridden_by_given_fields():
    """RecordingOptions is frozen and keyword-only; replace changes the fields given, checked; recording_options
    takes a RecordingOptions or None (the default), nothing else."""
    with pytest.raises(TypeError):
        RecordingOptions("npz")
    with pytest.raises(dataclasses.FrozenInstanceError):
        RecordingOptions().format = "npz"
    base = RecordingOptions(format="npz", compression="deflate")
    assert base.replace(writers=3) == RecordingOptions(format="npz", compression="deflate", writers=3)
    with pytest.raises(OptionError, match="compression='lz4': the npz format takes none, deflate"):
        base.replace(compression="lz4")
    assert recording_options() == RecordingOptions() and recording_options(base) is base
    with pytest.raises(TypeError, match="options must be a RecordingOptions, got dict"):
        recording_options({"format": "npz"})


def test_make_recorder_follows_the_options(tmp_path):
    """make_recorder builds the format's recorder with the options' fields."""
    from helpers.synthetic import synthetic_description

    env = synthetic_description(num_envs=2, max_steps=4)
    packed = make_recorder(tmp_path / "a", env, RecordingOptions(compression="lz4", statistics=False))
    npz = make_recorder(
        tmp_path / "b", env, RecordingOptions(format="npz", writers=1, compression="deflate", compression_level=3)
    )
    try:
        assert isinstance(packed, PackedRecorder) and packed._stats is None
        assert isinstance(npz, NpzRecorder) and npz._compression_level == 3 and len(npz._threads) == 1
    finally:
        packed.close()
        npz.close()

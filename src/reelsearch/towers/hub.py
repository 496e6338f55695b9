"""``hf:NAME_OR_DIR``: a CLIP- or SigLIP-family checkpoint in the Hugging Face layout, as a local folder.

``NAME_OR_DIR`` is a folder (``config.json`` and the weights in it), or a hub repository id (``openai/clip-vit-base-
patch32``, optionally ``@REVISION``) fetched on first use into the Hugging Face cache by ``huggingface_hub`` (with
its progress bars; ``HF_ENDPOINT``, ``HF_HOME`` and ``HF_TOKEN`` as huggingface_hub reads them). Only what a model
needs is fetched: its configs, tokenizer files and safetensors weights (``pytorch_model.bin`` where a repository
has no safetensors). Offline (``HF_HUB_OFFLINE=1``, or no network) a cached checkpoint is used as it is; one that
is not cached is a ReelsearchError saying how to get it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from reelsearch.errors import ReelsearchError

logger = logging.getLogger(__name__)

PREFIX = "hf:"
#: The files of a checkpoint a model needs, besides its weights.
CONFIG_PATTERNS = ["config.json", "preprocessor_config.json", "processor_config.json", "tokenizer*", "vocab*",
                   "merges.txt", "special_tokens_map.json", "added_tokens.json", "*.model"]


def is_hf(spec) -> bool:
    """Whether ``spec`` names a checkpoint in the Hugging Face layout (``hf:NAME_OR_DIR``)."""
    return isinstance(spec, (str, os.PathLike)) and str(spec).startswith(PREFIX)


def checkpoint_dir(spec: str) -> Path:
    """The local folder of ``hf:NAME_OR_DIR`` (fetched into the Hugging Face cache on first use)."""
    name = str(spec).removeprefix(PREFIX)
    if not name:
        raise ReelsearchError(f"{spec!r}: name a checkpoint, as hf:NAME_OR_DIR (a hub id or a local folder)")
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ReelsearchError(f"{spec}: {folder} has no config.json; not a checkpoint in the Hugging Face layout")
        return folder.resolve()
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
        raise ReelsearchError(f"{spec}: no such folder ({folder})")
    return _fetch(name)


def _fetch(name: str) -> Path:
    """Hub repository ``name`` (``REPO@REVISION``) in the Hugging Face cache, fetched when missing."""
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415 - optional package (text extra)
        from huggingface_hub.errors import (  # noqa: PLC0415 - optional package (text extra)
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as exc:
        raise ReelsearchError(f"hf:{name}: fetching a hub checkpoint needs huggingface_hub: pip install "
                              "'reelsearch[text]' (or pass a local folder, hf:/path/to/checkpoint)") from exc
    repo, _, revision = name.partition("@")
    how = (f"fetch it once where the hub is reachable (`hf download {repo}`, or any reelsearch command with "
           f"--model hf:{name}), or pass a local folder in the Hugging Face layout (--model hf:/path/to/folder)")
    try:
        folder = Path(snapshot_download(repo, revision=revision or None, allow_patterns=CONFIG_PATTERNS
                                        + ["*.safetensors"]))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(repo, revision=revision or None,
                                            allow_patterns=CONFIG_PATTERNS + ["pytorch_model.bin"]))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise ReelsearchError(f"hf:{name}: not in the Hugging Face cache, and the hub cannot be reached (offline: "
                              f"HF_HUB_OFFLINE=1, or no network); {how}") from None
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise ReelsearchError(f"hf:{name}: the hub has no such model or revision ({type(exc).__name__}; a private "
                              "or gated one needs HF_TOKEN)") from None
    except (HfHubHTTPError, OSError) as exc:
        raise ReelsearchError(f"hf:{name}: cannot fetch it ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                              f"{how}") from None
    if not (folder / "config.json").is_file():
        raise ReelsearchError(f"hf:{name}: the repository has no config.json; not a checkpoint in the Hugging Face "
                              "layout")
    return folder

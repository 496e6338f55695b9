"""The names a config may give for things implemented above it: loss presets and feature extractors.

Config checks names against these sets instead of importing the implementations (``reelsearch.losses`` and
``reelsearch.features.extractors`` sit above config, and the losses pull in torch). Each registry is keyed by exactly
its set here: adding a loss preset or an extractor means adding its name here too (tests/test_config_names.py).
"""

from __future__ import annotations

#: Names of ``reelsearch.losses.LOSS_PRESETS`` (``train.loss``, ``train.warmup_loss``).
LOSS_NAMES = frozenset({"vse", "torabi-pairwise", "annotation", "vse++", "mithun-weighted", "infonce"})

#: Names of ``reelsearch.features.extractors.EXTRACTORS``: the features reelsearch can compute itself.
EXTRACTOR_NAMES = frozenset({"efficientnet-lite0", "efficientnet-lite2", "backbone", "hof-mbh", "soundnet8",
                             "hf-image"})

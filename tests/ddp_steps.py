"""Three training steps of the toy mithun-expert model on one global batch of 32, in one process or in each rank of a
data-parallel group (``test_train.py``'s DDP test): run under torchrun as a script, it takes every precision given
in turn and rank 0 writes ``OUT/result-2-PRECISION.json``; in process, :func:`steps` gives the same result."""

from __future__ import annotations

import json
import os
import sys

import torch

import reelsearch.training.trainer as T
from reelsearch.config import TrainConfig, apply_overrides
from reelsearch.features.caches import DatasetSource
from reelsearch.losses import TrainLosses, train_losses
from reelsearch.models import create_model, model_config, text_processor_for
from reelsearch.process_group import leave
from reelsearch.training.distributed import DistInfo, init_distributed, shutdown
from reelsearch.training.joint_task import JointTask
from reelsearch.training.run import model_pairs
from reelsearch.training.task import epoch_batches
from train_fixtures import small


def steps(manifest: str, store: str, out: str, precision: str, info: DistInfo) -> dict:
    """The three steps' losses and the weights' sums after them (``T.native_bf16`` is the caller's to set)."""
    source, _ = DatasetSource.open(f"manifest:{manifest}", store)
    cfg = apply_overrides(model_config("mithun-expert"), small("mithun-expert"))
    caps = [c for it in source.dataset.items("train") for c in it.captions]
    torch.manual_seed(0)
    model = create_model(cfg, text_processor_for(cfg, caps))
    data = model_pairs(model, source, "train", progress=False)
    loop = TrainConfig(batch_size=32, lr=1e-3, epochs=1, precision=precision)
    losses = TrainLosses(train_losses(cfg.train).main)  # the model's loss, without its warm-up epoch
    trainer = T.Trainer(JointTask(model, losses, data, None, loop, info), out, progress=False)
    values = [trainer._step(b) for b in epoch_batches(len(data.captions), 32, 0, 0)[:3]]
    return {"loss": values, "weights": {k: v.double().sum().item() for k, v in model.state_dict().items()}}


if __name__ == "__main__":
    torch.set_num_threads(1)
    T.native_bf16 = lambda device: True  # exercise the autocast path whatever this CPU has
    manifest, store, out, *precisions = sys.argv[1:]
    info = init_distributed("cpu")
    for precision in precisions:
        result = steps(manifest, store, os.path.join(out, precision), precision, info)
        if info.rank == 0:
            with open(os.path.join(out, f"result-{info.world_size}-{precision}.json"), "w") as f:
                json.dump(result, f)
    shutdown(info)
    leave(0)  # by os._exit, as `reelsearch train` under torchrun ends: the gloo teardown race at interpreter exit

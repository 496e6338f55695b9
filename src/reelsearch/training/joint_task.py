"""Training a joint model on caption-video pairs (`reelsearch train`): the task the Trainer runs for it.

An epoch visits every training caption once, in batches drawn from (seed, epoch); a batch's loss is the ranking loss
over its caption-by-video similarity matrix (two captions of one video are never each other's negatives). Under
torchrun each rank embeds its share of the global batch and scores it against the whole gathered batch, so the
hardest negative is the global one. Validation is the evaluation harness on the full validation split, plus the
loss over ``val_samples`` validation captions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from reelsearch.config import TrainConfig
from reelsearch.errors import ReelsearchError
from reelsearch.evaluation.evaluator import RetrievalEvaluator
from reelsearch.features.pairs import PairData
from reelsearch.losses import TrainLosses
from reelsearch.models import load_model
from reelsearch.training.distributed import DistInfo, gather_with_grad
from reelsearch.training.task import RetrievalTask, Validation, epoch_batches, parameter_groups, retrieval_validation


class JointTask(RetrievalTask):
    """Train ``model`` (a JointModel) with ``losses`` on the ``train`` pairs, validating on ``val`` (or not, when
    None), as its ``cfg`` (the config's ``train`` section) says; ``dist``: the process's place under torchrun."""

    def __init__(self, model, losses: TrainLosses, train: PairData, val: PairData | None, cfg: TrainConfig,
                 dist: DistInfo | None = None):
        self.dist = dist or DistInfo()
        if cfg.batch_size % self.dist.world_size:
            raise ReelsearchError(f"batch size {cfg.batch_size} is not divisible by {self.dist.world_size} ranks")
        self.model = self.module = model
        self.losses = losses.to(self.dist.device)
        self.train_data, self.val_data, self.cfg = train, val, cfg

    def parameter_groups(self) -> list[dict]:
        return parameter_groups(self.model, self.losses.main, self.cfg.lr_scale)

    def batches(self, epoch: int) -> list[np.ndarray]:
        return epoch_batches(len(self.train_data.captions), self.cfg.batch_size, self.cfg.seed, epoch)

    def loss(self, idx: np.ndarray, epoch: int) -> torch.Tensor:
        """Loss of the global batch of captions ``idx`` (this rank's share of it when distributed)."""
        data, info, model = self.train_data, self.dist, self.model
        loss_fn = self.losses.at(epoch)
        bl = len(idx) // info.world_size
        local = idx[info.rank * bl : (info.rank + 1) * bl] if info.enabled else idx
        vids_global = data.cap2vid[idx]
        t = model.text_forward(data.text_batch(model.text_processor, local, info.device))
        v = model.video_forward(data.video_batch(data.cap2vid[local], info.device))
        if not info.enabled:
            sims = model.similarity(t, v).float()
            same = torch.as_tensor(vids_global[:, None] == vids_global[None, :], device=sims.device)
            return loss_fn(sims, positive_mask=same)
        tg, vg = gather_with_grad(t, info), gather_with_grad(v, info)  # FrameStates are padded, then gathered
        vids_local = data.cap2vid[local]
        same = torch.as_tensor(vids_local[:, None] == vids_global[None, :], device=t.device)
        pos = torch.arange(bl, device=t.device) + info.rank * bl
        s_c2v = model.similarity(t, vg).float()  # local captions x all videos
        s_v2c = model.similarity(tg, v).t().float()  # local videos x all captions
        loss = loss_fn.forward_rect(s_c2v, pos, s_v2c, pos, mask_c2v=same, mask_v2c=same)
        # gradients are summed over ranks: a per-rank mean must be scaled so the sum is the global mean
        return loss / info.world_size if getattr(loss_fn, "reduction", "sum") == "mean" else loss

    def validate(self) -> Validation | None:
        """Retrieval metrics (and mean validation loss) on the validation pairs; the loss is over ``val_samples``
        random validation captions (all when null), the same ones every epoch. Selection: ``cfg.selection``."""
        data = self.val_data
        if data is None:
            return None
        evaluator = RetrievalEvaluator(data, self.cfg.eval_batch_size)
        res = evaluator(self.model)
        sims = next(iter(evaluator.last_scores.values()))
        order = np.arange(len(data.captions))
        if self.cfg.val_samples and self.cfg.val_samples < len(order):
            order = np.sort(np.random.default_rng(0).choice(order, self.cfg.val_samples, replace=False))
        losses = []
        for batch in epoch_batches(len(order), self.cfg.batch_size, 0, 0):
            idx = order[batch]
            vids = data.cap2vid[idx]
            same = torch.as_tensor(vids[:, None] == vids[None, :])
            losses.append(float(self.losses.main(torch.as_tensor(sims[idx][:, vids]), positive_mask=same)))
        res["val_loss"] = float(np.mean(losses))
        score = -res["val_loss"] if self.cfg.selection == "val_loss" else res["RSum"]
        return retrieval_validation(res, score, val_loss=res["val_loss"])

    def save(self, directory: Path) -> None:
        self.model.save(directory)

    def load(self, directory: Path) -> None:
        self.model.load_state_dict(load_model(directory).state_dict())

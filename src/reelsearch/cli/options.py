"""What several commands share: option handling that is not a command."""

from __future__ import annotations


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads (None or 0: torch's default)."""
    if threads:
        import torch  # heavy: only a command that runs a model needs it

        torch.set_num_threads(threads)

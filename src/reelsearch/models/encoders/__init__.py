"""Text and video encoders: batch-first, padded inputs with lengths, masked everywhere."""

from .attention import FrameStates, SoftFrameAttention
from .masking import last_valid, lengths_to_mask, masked_max, masked_mean
from .sequence import SequenceEncoder, TransformerStack
from .smsdc import MSDC, SMSDC, DilatedConv

__all__ = [
    "DilatedConv",
    "FrameStates",
    "MSDC",
    "SMSDC",
    "SequenceEncoder",
    "SoftFrameAttention",
    "TransformerStack",
    "last_valid",
    "lengths_to_mask",
    "masked_max",
    "masked_mean",
]

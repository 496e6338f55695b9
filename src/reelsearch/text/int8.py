"""Int8 MiniLM for query encoding: torch dynamic quantisation of the BERT's linear layers (no extra package).

Weights become int8 per output channel; each call quantises its input activations per tensor (fbgemm/x86: 7-bit,
``reduce_range``). Every ``nn.Linear`` of the Transformer layers is quantised except layer 0's feed-forward pair
(``intermediate`` and ``output``): their inputs carry the largest outliers (max/median 17x and 24x on Flickr8k
captions) and quantising them costs the most accuracy. On one core this makes encoding a short query with the
bundled model about 1.4x faster and a batch of 32 about 1.3x (docs/benchmarks.md, "Query encoding: float32 vs
int8 MiniLM").

Two properties a user should know: the embeddings drift slightly from float32 (cosine ~0.98 for the bundled model's
caption embeddings; on Flickr8k dev R@1 moves within noise, i2t +0.9 and t2i -0.08, and RSum -2.4), and because
the activation scale is taken over the whole batch, a caption's int8 embedding depends a little on the captions
encoded with it.
Training and the feature caches of training stay float32; int8 is an opt-in run-time choice of the text encoder
(``MiniLMEncoder(int8=True)``, ``model.use_int8_text()``, ``Searcher(int8_text=True)``, ``--int8-text``).
"""

from __future__ import annotations

import re
import warnings

#: Linear layers (names inside the BERT model) left in float32.
FLOAT_LINEARS = re.compile(r"^encoder\.layer\.0\.(intermediate|output)\.dense$")
#: CPU capabilities (``torch.backends.cpu.get_cpu_capability()``) on which the x86/fbgemm int8 kernels run.
X86_INT8_CAPABILITIES = ("AVX2", "AVX512")


def int8_unavailable(device="cpu") -> str | None:
    """Why int8 MiniLM cannot run fast on ``device`` in this process (None when it can)."""
    import torch

    if torch.device(device).type != "cpu":
        return f"int8 runs on the CPU only (the text encoder is on {device})"
    try:
        from torch.ao.quantization import quantize_dynamic  # noqa: F401  (deprecated in torch 2.10+, still there)
    except ImportError:
        return f"this torch ({torch.__version__}) has no torch.ao.quantization.quantize_dynamic"
    engine = quantized_engine()
    if engine in ("x86", "fbgemm"):
        capability = torch.backends.cpu.get_cpu_capability()
        if capability not in X86_INT8_CAPABILITIES:
            return f"this CPU has no AVX2 (torch reports {capability}); the x86 int8 kernels need it"
    elif engine != "qnnpack":  # "none": a torch built without quantised kernels
        return f"torch has no int8 engine here (torch.backends.quantized.engine is {engine!r})"
    return None


def quantized_engine() -> str:
    """torch's int8 engine: "x86" / "fbgemm" (x86 CPUs), "qnnpack" (ARM), "none" (no int8 kernels)."""
    import torch

    return torch.backends.quantized.engine


def resolve_int8(requested: bool, device="cpu") -> bool:
    """``requested``, unless int8 cannot run on ``device``: then False, with a warning that says why."""
    if not requested:
        return False
    reason = int8_unavailable(device)
    if reason:
        warnings.warn(f"int8 text encoder unavailable, using float32: {reason}", RuntimeWarning, stacklevel=3)
        return False
    return True


def quantize_bert(bert) -> int:
    """Quantise ``bert``'s linear layers (but ``FLOAT_LINEARS``) to int8 in place; returns how many were."""
    from torch import nn
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    names = [n for n, m in bert.named_modules()
             if isinstance(m, nn.Linear) and n.startswith("encoder.layer.") and not FLOAT_LINEARS.match(n)]
    with warnings.catch_warnings():  # torch announces the move of this API to torchao on every call
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        quantize_dynamic(bert, {n: per_channel_dynamic_qconfig for n in names}, inplace=True)
    return len(names)


def is_quantized(bert) -> bool:
    """Whether ``bert`` holds int8 (dynamically quantised) linear layers."""
    from torch.ao.nn.quantized.dynamic import Linear

    return any(isinstance(m, Linear) for m in bert.modules())

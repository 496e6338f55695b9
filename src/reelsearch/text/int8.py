"""Int8 MiniLM for query encoding: ONNX Runtime dynamic quantisation of the exported BERT (``onnx_runtime``).

Weights become int8 per output channel; each call quantises the input activations of every quantised product per
tensor (uint8). Every weight product of the Transformer layers is quantised (queries, keys, values, attention
output, feed-forward) except layer 0's feed-forward pair (``intermediate`` and ``output``): their inputs carry the
largest outliers (max/median 17x and 24x on Flickr8k captions) and quantising them costs the most accuracy; the
attention products between activations, the embeddings and the LayerNorms stay float32. The quantised graph is
cached beside the float32 export.

Two properties a user should know: the embeddings drift slightly from float32, and because the activation scale is
taken over the whole batch, a caption's int8 embedding depends a little on the captions encoded with it
(docs/search.md gives the measured speed and retrieval figures). Training and the feature caches of training stay
float32; int8 is an opt-in run-time choice of the text encoder (``MiniLMEncoder(int8=True)``,
``model.use_text_encoder("int8")``, ``Searcher(text_encoder="int8")``, ``--text-encoder int8``).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from reelsearch.onnx_runtime import onnxruntime_unavailable, quiet_quantization

#: Weight products (ONNX node names of the exported BERT) left in float32.
FLOAT_MATMULS = re.compile(r"/encoder/layer\.0/(intermediate|output)/dense/MatMul$")


def int8_unavailable(device="cpu") -> str | None:
    """Why int8 MiniLM cannot run on ``device`` in this process (None when it can)."""
    reason = onnxruntime_unavailable(device)
    return f"int8 MiniLM runs in ONNX Runtime: {reason}" if reason else None


def resolve_int8(requested: bool, device="cpu") -> bool:
    """``requested``, unless int8 cannot run on ``device``: then False, with a warning that says why."""
    if not requested:
        return False
    reason = int8_unavailable(device)
    if reason:
        warnings.warn(f"int8 text encoder unavailable, using float32: {reason}", RuntimeWarning, stacklevel=3)
        return False
    return True


def weight_matmuls(model) -> list[str]:
    """Names of the MatMul nodes of an ONNX ``model`` whose second input is a weight (an initializer)."""
    weights = {init.name for init in model.graph.initializer}
    return [node.name for node in model.graph.node if node.op_type == "MatMul" and node.input[1] in weights]


def quantize_export(float_path: Path, int8_path: Path) -> int:
    """Write the int8 version of the float32 export ``float_path`` to ``int8_path``; returns how many weight
    products were quantised."""
    import onnx  # noqa: PLC0415 - optional package (text extra)
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415 - optional package (text extra)

    model = onnx.load(str(float_path))
    weighted = weight_matmuls(model)
    chosen = [name for name in weighted if "/encoder/layer." in name and not FLOAT_MATMULS.search(name)]
    others = [node.name for node in model.graph.node if node.name not in chosen]
    with quiet_quantization():
        quantize_dynamic(str(float_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                         nodes_to_quantize=chosen, nodes_to_exclude=others,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return len(chosen)

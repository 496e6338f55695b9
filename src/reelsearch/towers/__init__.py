"""Open image-text towers: CLIP- and SigLIP-family checkpoints in the Hugging Face layout (``hf:NAME_OR_DIR``),
found locally or fetched from the hub (``towers.hub``), run in torch or ONNX Runtime (``towers.clip``)."""

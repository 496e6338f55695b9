"""Training: the trainer loop, resumable training state, distributed data parallel, logs."""

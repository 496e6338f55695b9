"""Training: one Trainer (``trainer``) driving tasks (``task``: ``joint_task`` for `train`, ``cnn_tail`` for
`tune-cnn`, ``adapt_text`` for `adapt-text`), resumable training state, distributed data parallel, logs; ``run``,
``fusion`` and ``querybank`` drive the other commands."""

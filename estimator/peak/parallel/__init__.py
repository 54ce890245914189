"""Memory per GPU when a model is trained or served on several GPUs.

- :mod:`estimator.peak.parallel.zero`: model states under DDP and DeepSpeed ZeRO-1/2/3 with offload
  (formulas with their sources, checked against DeepSpeed's own estimators);
- :mod:`estimator.peak.parallel.fsdp`: FSDP2 (``fully_shard`` per block and on the root) simulated on
  fake tensors with a fake process group, through the one peak engine's tracker;
- :mod:`estimator.peak.parallel.tp`: tensor-parallel inference, split as transformers' TP plans split.
- :class:`estimator.options.ParallelSpec`: what the request asks for (gpus, nodes, strategy, offload).
"""

"""The Ray backend (``backend: ray``): Executors as Ray actors, weights through the object store.

* :mod:`.backend`: connecting (local Ray, ``auto``, an address) and placement groups;
* :mod:`.actors`: the Executor actors around the local :class:`~mlxe.runtime.executor.Executor`
  (A3C) and :class:`~mlxe.runtime.rollout.RolloutExecutor` (every other algorithm);
* :mod:`.pool`: calls in flight, replies, dead actors replaced;
* :mod:`.server`: the parameter server and its gradient combiners (fifo, average, DC-ASGD);
* :mod:`.sync`, :mod:`.experience`, :mod:`.gradients`: the A3C schedules of ``ray.mode``;
* :mod:`.rollouts`: the segment algorithms' local IS / OA schedule over Ray actors;
* :mod:`.learner`: a segment algorithm's Learner in the driver, or in an actor with GPUs (``ray.learner_num_gpus``);
* :mod:`.stats`: run-wide statistics, ``status.json`` and ``mlxe status``;
* :mod:`.run`: :func:`~mlxe.runtime.ray.run.run_ray`, what ``mlxe.train`` calls.

Nothing here is imported unless a run asks for ``backend: ray``.
"""

"""The Ray backend (``backend: ray``): Executors as Ray actors, weights through the object store.

* :mod:`.backend`: connecting (local Ray, ``auto``, an address) and placement groups;
* :mod:`.actors`: the Executor actors around the local :class:`~mlxe.runtime.rollout.RolloutExecutor`
  (segments for the schedule, or episodes and gradients for the parameter server);
* :mod:`.pool`: calls in flight, replies, dead actors replaced;
* :mod:`.server`: the parameter server and its gradient combiners (fifo, average, DC-ASGD);
* :mod:`.rollouts`: the local schedule over Ray actors (``ray.mode`` sync and async_experience);
* :mod:`.gradients`: the A3C parameter server (``ray.mode: async_gradients``);
* :mod:`.learner`: the Learner in the driver, or in an actor with GPUs (``ray.learner_num_gpus``);
* :mod:`.replay`: the Memorizer in Ray actors, Ape-X's replay shards (``learner.memorizer: ray``);
* :mod:`.stats`: run-wide statistics, ``status.json`` and ``mlxe status``;
* :mod:`.run`: what a run on Ray holds (its Executor set, Learner, evaluation) for either schedule;
* :mod:`.train`: :func:`~mlxe.runtime.ray.train.run_ray`, what ``mlxe.train`` calls.

Nothing here is imported unless a run asks for ``backend: ray``.
"""

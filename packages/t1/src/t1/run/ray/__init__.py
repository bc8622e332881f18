"""The Ray runtime (``runtime.kind: ray``) under the one step driver (`t1.run.driver`).

`t1.run.ray.runtime.RayRuntime` is the runtime; `t1.run.ray.rollout` runs a trial on a host (routing,
re-queueing, parking); `t1.run.ray.actors` holds the engine replica, trainer worker and sandbox host actors;
`t1.run.ray.placement` the placement group and the local cluster; `t1.run.ray.liveness` the probes.
Importing this package imports no Ray: Ray loads when a run starts.
"""

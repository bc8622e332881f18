"""The training loop on Ray (``runtime.kind: ray``): placement, actors, and the sync or one-step async loop.

`t1.run.ray.loop.RayRun` is the run; `t1.run.ray.actors` holds the engine replica, trainer worker and
sandbox host actors; `t1.run.ray.placement` the placement group and the local cluster. Importing this
package imports no Ray: Ray loads when a run starts.
"""

"""The Megatron-core trainer backend (``trainer.backend: megatron``; T1 §6).

`t1_trainer.megatron.backend.MegatronBackend` implements `t1_trainer.base.TrainerBackend` on megatron-core
models (`t1_trainer.megatron.model`), with the HF <-> Megatron weight names of `t1_trainer.megatron.names`,
R3 through megatron's router replay (`t1_trainer.megatron.replay`), and each rank's shards of the weights
and their gradients over tp, dp and ep (`t1_trainer.megatron.sharding`). megatron-core is the optional
``t1-trainer[megatron]`` extra: nothing here imports it at package import time.
"""

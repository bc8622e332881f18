"""The Megatron-core trainer backend (``trainer.backend: megatron``; T1 §6).

`t1_trainer.megatron.backend.MegatronBackend` implements `t1_trainer.base.TrainerBackend` on megatron-core
models (`t1_trainer.megatron.model`), with the HF <-> Megatron weight names of `t1_trainer.megatron.names`
and R3 through megatron's router replay (`t1_trainer.megatron.replay`). megatron-core is the optional
``t1-trainer[megatron]`` extra: nothing here imports it at package import time.
"""

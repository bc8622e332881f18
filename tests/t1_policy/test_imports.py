import subprocess
import sys

CODE = """
import sys, t1_policy
t1_policy.num_real_tokens(512)
assert 'transformers' not in sys.modules
t1_policy.build_model
assert 'transformers' in sys.modules
"""


def test_scoring_helpers_import_without_transformers():
    # the trainer's log-prob kernel and the engine's sampler score tokens without loading the model library
    subprocess.run([sys.executable, "-c", CODE], check=True)


def test_model_parts_are_the_model_modules():
    import t1_policy
    from t1_policy import model

    assert t1_policy.build_model is model.build_model
    assert t1_policy.hf_config_from_spec is model.hf_config_from_spec

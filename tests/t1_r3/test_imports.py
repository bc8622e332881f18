import subprocess
import sys

CODE = """
import sys, t1_r3
t1_r3.check_routing
assert 'torch' not in sys.modules
t1_r3.replay_routing
assert 'torch' in sys.modules
"""


def test_record_helpers_import_without_torch():
    # t1_tito (no torch, DESIGN.md) may use the record helpers; only capture/replay load torch.
    subprocess.run([sys.executable, "-c", CODE], check=True)

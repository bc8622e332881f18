"""t1_tito imports no torch (DESIGN.md): it takes the routing contract from t1_r3's numpy-only records."""

import subprocess
import sys

TITO_CODE = """
import sys, t1_tito
t1_tito.stitch, t1_tito.RoutingMismatchError
assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))
"""


def test_importing_tito_leaves_torch_out():
    # DESIGN.md: t1_tito imports no torch; it takes the routing contract from t1_r3's numpy-only records.
    subprocess.run([sys.executable, "-c", TITO_CODE], check=True)

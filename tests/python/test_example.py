"""examples/python_fit.py, run as a user would."""
import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), '..', '..', 'examples', 'python_fit.py')


def test_example_script(tiny, tmp_path):
    p = subprocess.run([sys.executable, EXAMPLE, str(tiny['npy']), str(tmp_path / 'phase.tiff')],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert 'C10' in p.stdout and (tmp_path / 'phase.tiff').stat().st_size > 0
    assert (tmp_path / 'phase.tiff').read_bytes() == (tiny['fit_dir'] / 'phase.tiff').read_bytes()

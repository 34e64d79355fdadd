#!/usr/bin/env python3
"""Fit the aberrations of a 4D-STEM acquisition and save its phase image, from Python.

    python3 examples/python_fit.py [DATA] [phase.tiff]

DATA is a .qem, .npy (with its sidecar .json, or see ssb4d.open's keywords), HDF5/EMD/py4DSTEM,
Arina or .mib file; without it, the built-in simulated dataset of `ssb4d fit` is used.
From a build tree: PYTHONPATH=build/python python3 examples/python_fit.py (docs/python.md).
"""
import sys

import ssb4d


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else None
    out = sys.argv[2] if len(sys.argv) > 2 else 'phase.tiff'
    session = ssb4d.open(data) if data else ssb4d.builtin()
    with session:
        cal = session.calibrate()
        print('shape %s, %d BF pixels, backend %s' % (session.shape, cal.n_bf, session.backend))
        fit = session.fit()
        print('C10 %.3f nm  C12 %.3f nm  phi12 %.2f deg (scan frame)  loss %.6g  confident %s'
              % (fit.C10_nm, fit.C12_nm, fit.phi12_deg, fit.loss, fit.confident))
        if session.truth:
            t = session.truth
            print('truth: C10 %.3f nm  C12 %.3f nm  phi12 %.2f deg' % (t['C10_nm'], t['C12_nm'], t['phi12_deg']))
        session.save_phase(out)
        print('wrote', out, '(trace %s)' % fit.trace_sha256[:16])


if __name__ == '__main__':
    main()

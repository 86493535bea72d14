"""Writes fuzz_npy's seed corpus: .npy files exactly as numpy writes them (format versions 1.0,
2.0 and 3.0, every dtype qdp reads and a few it refuses), and CSV text as libqdp reads a text file,
small enough to fuzz quickly.

    /usr/bin/python3 tests/fuzz/make_npy_corpus.py tests/fuzz/corpus/fuzz_npy
"""
import io
import os
import sys

import numpy as np
from numpy.lib import format as npy_format


def save(out, name, array, version=None):
    buf = io.BytesIO()
    # version None lets numpy choose, as np.save does (1.0 unless the header needs more).
    npy_format.write_array(buf, np.asanyarray(array), version=version, allow_pickle=False)
    with open(os.path.join(out, name), 'wb') as f:
        f.write(buf.getvalue())


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    values = np.arange(8, dtype=np.float64) / 8
    save(out, 'v1-f8-1d', values)
    save(out, 'v1-f4-2d', values.astype(np.float32).reshape(2, 4))
    save(out, 'v1-i8-basis', np.array([5, 0, 7], dtype=np.int64))
    save(out, 'v1-c8-state', (values[:4] + 1j * values[4:]).astype(np.complex64))
    save(out, 'v1-c16-state-2d', (values + 0j).reshape(2, 4))
    save(out, 'v1-f8-empty', np.zeros((0, 3)))
    save(out, 'v2-f8-2d', values.reshape(4, 2), version=(2, 0))
    save(out, 'v3-f4-1d', values.astype(np.float32), version=(3, 0))
    # Refused by qdp: Fortran order, big-endian, three dimensions, a structured dtype.
    save(out, 'v1-f8-fortran', np.asfortranarray(values.reshape(2, 4)))
    save(out, 'v1-f8-big-endian', values.astype('>f8'))
    save(out, 'v1-f8-3d', values.reshape(2, 2, 2))
    save(out, 'v1-structured', np.zeros(2, dtype=[('x', '<f8'), ('y', '<i8')]))
    # Text: CSV as numpy and spreadsheets write it (a header, a column of text, quotes, CRLF).
    text = io.StringIO()
    np.savetxt(text, values.reshape(4, 2), delimiter=',')
    for name, csv in (('csv-4x2', text.getvalue()),
                      ('csv-header', 'id,"x",y\r\nA,0.1,-2e-3\r\n\r\nB,"1_000",inf\r\n'),
                      ('csv-basis', 'index\n5\n0\n7\n')):
        with open(os.path.join(out, name), 'w', newline='') as f:
            f.write(csv)


if __name__ == '__main__':
    main()

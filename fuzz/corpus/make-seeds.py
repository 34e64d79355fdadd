#!/usr/bin/env python3
"""Writes the committed seed inputs of fuzz/corpus/{stream,npy,mib} (run from anywhere; the
.qem seeds are the golden files, copied by fuzz/CMakeLists.txt at configure time)."""
import os, struct
here = os.path.dirname(os.path.abspath(__file__))

def put(sub, name, data):
    os.makedirs(os.path.join(here, sub), exist_ok=True)
    with open(os.path.join(here, sub, name), "wb") as f:
        f.write(data)

# stream: selector byte, (n - 1) as u16 LE, stream bytes. The six examples of qem-format.md §6.5,
# plus edge cases of every selector.
ex = [("sparse-6.5a", 252, 8, "800020028102"),
      ("rans53-6.5b", 53, 12, "3448f466ffffffff180220000001e2120002"),
      ("sparse-6.5c", 252, 20, "0405"),
      ("const-6.5d", 255, 6, "0700"),
      ("literal-6.5e", 254, 4, "0000ffff0000ffff"),
      ("rans63-6.5f", 63, 8, "bfb1aa052d200021002000a42100"),
      ("zero-512", 253, 512, ""),
      ("const-65535", 255, 512, "ffff"),
      ("sparse-511", 252, 512, "0000ffff"),
      ("rans-state-low", 10, 3, "00008000" + "00" * 8)]
for name, sel, n, hx in ex:
    put("stream", name, bytes([sel]) + struct.pack("<H", n - 1) + bytes.fromhex(hx))

# npy: well-formed headers of the versions and dtypes ssb4d reads, with a little data.
def npy(descr, shape, version=1, fortran=False, data=b""):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False",
        "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")")
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    d = d + " " * pad + "\n"
    ln = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + d.encode() + data
put("npy", "u2-4d", npy("<u2", (2, 2, 3, 3), data=bytes(72)))
put("npy", "u1-4d", npy("|u1", (1, 2, 2, 2), data=bytes(8)))
put("npy", "f4-2d-fortran", npy("<f4", (3, 4), fortran=True, data=bytes(48)))
put("npy", "u4-v2", npy("<u4", (5,), version=2, data=bytes(20)))
put("npy", "c8-v3", npy("<c8", (1, 1), version=3, data=bytes(8)))
put("npy", "scalar", npy("<f8", ()))

# mib: Merlin frame headers (single chip 384 bytes, quad 768), NUL padded, with small frames.
def mib(dtype, w, h, hdr=384, chips=1, layout="   1x1", depth=12, data=None):
    fields = ["MQ1", "000001", "%05d" % hdr, "%02d" % chips, "%04d" % w, "%04d" % h, dtype,
              layout, "01" if chips == 1 else "0F", "2024-01-01 12:00:00.000000", "0.001000",
              "0", "0", "0"] + ["%.6E" % t for t in (10, 511, 0, 0, 0, 0, 0, 0)] + \
             ["3RX"] + ["%03d" % v for v in range(25)] + \
             ["MQ1A", "2024-01-01T12:00:00.000000000Z", "1000000ns", str(depth)]
    t = ",".join(fields) + ","
    b = t.encode().ljust(hdr, b"\0")
    return b + (data if data is not None else b"")
put("mib", "u08-16x16", mib("U08", 16, 16, depth=6, data=bytes(range(256))))
put("mib", "u16-8x8", mib("U16", 8, 8, data=bytes(128)))
put("mib", "u32-4x4", mib("U32", 4, 4, depth=24, data=bytes(64)))
put("mib", "r64-1bit-64x2", mib("R64", 64, 2, depth=1, data=bytes(16)))
put("mib", "r64-12bit-8x4", mib("R64", 8, 4, data=bytes(64)))
put("mib", "u16-256-header-only", mib("U16", 256, 256))
put("mib", "quad-u16-header", mib("U16", 512, 512, hdr=768, chips=4, layout="   2x2"))
put("mib", "hdr-text", b"HDR,\t\nTime and Date Stamp (day, mnth, yr, hr, min, s):\t01/01/2024 12:00:00\n"
    b"Chip ID:\tW529_F5,-,-,-\nFrames in Acquisition (Number):\t65536\n"
    b"Frames per Trigger (Number):\t256\nCounter Depth (number):\t12\nScanX:\t256\nScanY:\t256\nEnd\t\n")

# mib, issue 39: frame time stamps for mib_line_scan (byte 0 = 0: raw little-endian int64 ns, 1 ns
# digits): RosettaSciIO's 4x2 Merlin acquisition (102 ms frames on a 10 ns clock, a 20.8 us line
# flyback) and a gap one 10 ns tick longer than the rest; a .hdr cut short (no End line); a
# 6-bit frame holding 244.
def stamps(gaps, t0=1620406270905800928):
    t = [t0]
    for g in gaps:
        t.append(t[-1] + g)
    return b"\0" + b"".join(struct.pack("<q", x) for x in t)
put("mib", "ts-4x2-flyback-20us", stamps([101999990, 102000000, 101999980, 102020820, 102000000,
                                          102000000, 101999990]))
put("mib", "ts-one-tick", stamps([1849990] * 3 + [1850000] + [1849990] * 3))
put("mib", "hdr-cut-short", b"HDR,\t\r\nCounter Depth (number):\t6\r\nFrames in Acquisition (Number):\t9\r\n"
    b"Frames per Tri")
put("mib", "u08-6bit-244", mib("U08", 4, 4, depth=6, data=bytes([1] * 15 + [244])))

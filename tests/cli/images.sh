#!/usr/bin/env bash
# Pictures and the data flow between commands (issue 12): `calibrate DATA` writes
# DATA-stem.calibration.json and .png beside DATA (refused when they exist unless --force; -o
# moves both), `fit`, `reconstruct` and `fit-regions` take that file when no --calibration is
# given (one line on stderr, none with --quiet) and give the same bytes as with --calibration; a
# file there with aberrations or from other data is passed over with a warning; phase.png (fit,
# reconstruct -o x.png) and defocus.png are drawn at an integer scale (long side >= 512 px, the
# scale in a tEXt chunk) and larger by their legend margins while phase.tiff stays native;
# defocus.png's bar spans at least 1 nm with the spread printed and its labels clear of the edges,
# the calibration picture's disk is not saturated, virtual images' colour bars name their unit; `import` records the sidecar's microscope values (info shows them,
# flags win); simulate and import draw the shared progress bar, and import's bar and summary
# give the same MiB/s.
# Needs bash, grep, cmp, od, cp and script (util-linux) for a terminal.
# usage: images.sh SSB4D_BIN SHARED_DATA
set -u
BIN=$1
. "$(dirname "$0")/lib/harness.sh"

# png_size FILE: "WIDTHxHEIGHT" from the PNG header (IHDR), "" when FILE is not a PNG.
png_size() {
    [ "$(od -An -tx1 -N8 "$1" 2>/dev/null | tr -d ' \n')" = 89504e470d0a1a0a ] || return 0
    od -An -tu1 -j16 -N8 "$1" | awk '{ printf "%dx%d\n", (($1*256+$2)*256+$3)*256+$4, (($5*256+$6)*256+$7)*256+$8 }'
}
# png_colour FILE: the PNG colour type (0 grey, 2 RGB).
png_colour() { od -An -tu1 -j25 -N1 "$1" | tr -d ' '; }
# png_text FILE KEY: the value of the PNG's tEXt chunk KEY ("" when none), read chunk by chunk.
png_text() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
i = 8
while i + 8 <= len(b):
    n, = struct.unpack('>I', b[i:i + 4])
    if b[i + 4:i + 8] == b'tEXt':
        k, _, v = b[i + 8:i + 8 + n].partition(b'\0')
        if k.decode('latin-1') == sys.argv[2]:
            print(v.decode('latin-1'))
    i += 12 + n
PY
}
# png_grey FILE X0 Y0 X1 Y1: "MIN MAX" of the grey levels (the first channel) in [X0, X1) x [Y0, Y1)
# of an 8-bit grey or RGB PNG, decoded with zlib (the PNG filters undone row by row).
png_grey() {
    /usr/bin/python3 - "$@" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], 'rb').read()
x0, y0, x1, y1 = map(int, sys.argv[2:6])
i, idat = 8, b''
while i + 8 <= len(b):
    n, = struct.unpack('>I', b[i:i + 4])
    if b[i + 4:i + 8] == b'IHDR':
        w, h, depth, ct = struct.unpack('>IIBB', b[i + 8:i + 18])
    elif b[i + 4:i + 8] == b'IDAT':
        idat += b[i + 8:i + 8 + n]
    i += 12 + n
ch = {0: 1, 2: 3}[ct]
raw, st, prev, vals = zlib.decompress(idat), w * ch, bytearray(w * ch), []
for y in range(min(y1, h)):
    f, line = raw[y * (st + 1)], bytearray(raw[y * (st + 1) + 1:(y + 1) * (st + 1)])
    for x in range(st):
        a, up, c = line[x - ch] if x >= ch else 0, prev[x], prev[x - ch] if x >= ch else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + up) & 255
        elif f == 3: line[x] = (line[x] + (a + up) // 2) & 255
        elif f == 4:
            p = a + up - c
            pa, pb, pc = abs(p - a), abs(p - up), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
    if y >= y0:
        vals += [line[x * ch] for x in range(x0, min(x1, w))]
    prev = line
print(min(vals), max(vals))
PY
}
# tiff_size FILE: "WIDTHxHEIGHT" from the first IFD of a little-endian TIFF.
tiff_size() {
    /usr/bin/python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
off, = struct.unpack('<I', b[4:8])
n, = struct.unpack('<H', b[off:off + 2])
tags = {}
for k in range(n):
    tag, typ, cnt, val = struct.unpack('<HHII', b[off + 2 + 12 * k:off + 14 + 12 * k])
    tags[tag] = val & 0xFFFF if typ == 3 else val
print('%dx%d' % (tags[256], tags[257]))
PY
}

"$BIN" simulate --preset tiny -o "$T/s.npy" --quiet || { echo "FAIL: simulate"; exit 1; }

# --- calibrate: the default outputs beside DATA ------------------------------------------------
expect 0 "calibrate writes beside DATA" "wrote +$T/s.calibration.json" -- "$BIN" calibrate "$T/s.npy"
grep -qE "picture +$T/s.calibration.png" "$T/out" && ok || bad "calibrate does not name its picture"
[ -s "$T/s.calibration.json" ] && ok || bad "no s.calibration.json"
# 48 detector pixels drawn 11 x 11 (the long side >= 512 px), the legend band below the pattern.
sz=$(png_size "$T/s.calibration.png")
[ "${sz%x*}" = 528 ] && [ "${sz#*x}" -gt 528 ] && ok ||
    bad "calibration picture is $sz (want 528 wide: 48 px x 11, and taller: the legend band)"
[ "$(png_text "$T/s.calibration.png" ssb4d:display_scale)" = 11 ] && ok || bad "calibration picture: no display scale 11 in its text"
[ -n "$(png_text "$T/s.calibration.png" ssb4d:pixel_size_mrad)" ] && ok || bad "calibration picture: no pixel size in mrad in its text"
[ "$(png_colour "$T/s.calibration.png")" = 2 ] && ok || bad "calibration picture is not RGB (the green disk)"
# The disk is light grey, not saturated (issue 39: it was white): a square inside it, clear of the
# green circle (radius about 16 px here) and the cross at its centre (2 px arms), drawn 11 x 11.
read -r gmin gmax <<<"$(png_grey "$T/s.calibration.png" $((27 * 11)) $((20 * 11)) $((31 * 11)) $((23 * 11)))"
[ "$gmax" -lt 255 ] && [ "$gmin" -gt 150 ] && ok || bad "the calibration picture's disk is $gmin..$gmax (want light grey, below white)"
cp "$T/s.calibration.json" "$T/first.json"
expect 2 "calibrate refuses to replace its file" "s.calibration.json already exists \(use --force" -- \
    "$BIN" calibrate "$T/s.npy"
[ "$(wc -l <"$T/err")" -eq 1 ] && ok || bad "the refusal is not one line"
rm "$T/s.calibration.json"
expect 2 "calibrate refuses to replace its picture" "s.calibration.png already exists" -- "$BIN" calibrate "$T/s.npy"
[ ! -e "$T/s.calibration.json" ] && ok || bad "a refused calibrate wrote its file"
expect 0 "calibrate --force" "wrote" -- "$BIN" calibrate "$T/s.npy" --force
cmp -s "$T/s.calibration.json" "$T/first.json" && ok || bad "calibrate --force wrote another calibration"
expect 0 "calibrate -o" "picture +$T/c/my.png" -- bash -c "mkdir -p '$T/c' && '$BIN' calibrate '$T/s.npy' -o '$T/c/my.json'"
[ -s "$T/c/my.json" ] && [ -n "$(png_size "$T/c/my.png")" ] && ok || bad "calibrate -o wrote no FILE and FILE.png"
# --json names both outputs.
expect 0 "calibrate --json" '"picture":' -- "$BIN" calibrate "$T/s.npy" --force --json
# A folder that cannot be written: one line, before any work (not as root: root writes anyway).
if [ "$(id -u)" != 0 ]; then
    mkdir "$T/ro" && cp "$T/s.npy" "$T/ro/" && chmod a-w "$T/ro"
    expect 2 "calibrate in a read-only folder" "cannot write .*give -o FILE" -- "$BIN" calibrate "$T/ro/s.npy"
    chmod u+w "$T/ro"
fi

# --- later commands take it ---------------------------------------------------------------------
expect 0 "reconstruct takes the calibration" "calibration from $T/s.calibration.json" -- \
    "$BIN" reconstruct "$T/s.npy" -o "$T/auto.tiff"
[ "$(grep -c "calibration from" "$T/err")" -eq 1 ] && ok || bad "not exactly one info line"
"$BIN" reconstruct "$T/s.npy" -o "$T/auto.tiff" --quiet --force >/dev/null 2>"$T/err2"
grep -q "calibration from" "$T/err2" && bad "reconstruct --quiet printed the info line" || ok
"$BIN" reconstruct "$T/s.npy" --calibration "$T/s.calibration.json" -o "$T/given.tiff" --quiet >/dev/null 2>&1
cmp -s "$T/auto.tiff" "$T/given.tiff" && ok || bad "the calibration found beside DATA gives other bytes than --calibration"
# The sidecar states the rotation (0): calibrate's centre-of-mass value does not replace it.
grep -q "rotation 0.00 deg" "$T/out" && ok || bad "calibrate's measured rotation replaced the sidecar's stated one"
# An explicit --calibration wins, without the info line.
"$BIN" reconstruct "$T/s.npy" --calibration "$T/c/my.json" -o "$T/x.tiff" --quiet 2>"$T/err2" >/dev/null
grep -q "calibration from" "$T/err2" && bad "the info line with --calibration given" || ok
# fit and fit-regions say so too; --quiet silences the line.
expect 0 "fit takes the calibration" "calibration from $T/s.calibration.json" -- \
    "$BIN" fit "$T/s.npy" -o "$T/f" --trials 8 --threads 2
"$BIN" fit "$T/s.npy" -o "$T/fq" --trials 8 --threads 2 --quiet >/dev/null 2>"$T/err2"
grep -q "calibration from" "$T/err2" && bad "fit --quiet printed the info line" || ok
expect 0 "fit-regions takes the calibration" "calibration from" -- \
    "$BIN" fit-regions "$T/s.npy" --grid 1x1 -o "$T/r" --trials 8 --threads 2
# A file with aberrations there (a fit's calibration.json) is not taken: one warning.
cp "$T/f/calibration.json" "$T/s.calibration.json"
expect 0 "a fit's file beside DATA is passed over" "warning: .*s.calibration.json holds aberrations.*not used" -- \
    "$BIN" reconstruct "$T/s.npy" -o "$T/y.tiff" --quiet
grep -q "calibration from" "$T/err" && bad "a fit's file was taken" || ok
# A file made from other data is passed over too.
cp "$T/first.json" "$T/s.calibration.json"
cp "$T/s.npy" "$T/s2.npy" && printf '\001' | dd of="$T/s2.npy" bs=1 seek=200 conv=notrunc status=none
cp "$T/s.json" "$T/s2.json" && cp "$T/first.json" "$T/s2.calibration.json"
expect 0 "a file from other data is passed over" "warning: .*s2.calibration.json was made from other data.*not used" -- \
    "$BIN" reconstruct "$T/s2.npy" -o "$T/z.tiff" --quiet
# A malformed one is refused: one line, exit 2.
echo '{"schema": "ssb4d.calibration", "version": 99}' >"$T/s2.calibration.json"
expect 2 "a malformed file beside DATA" "newer ssb4d.*calibration file beside DATA" -- \
    "$BIN" reconstruct "$T/s2.npy" -o "$T/z.tiff" --quiet

# --- phase.png and defocus.png: the legend in margins; the TIFF untouched --------------------------
rm -f "$T/s.calibration.json" "$T/s.calibration.png"
"$BIN" reconstruct "$T/s.npy" -o "$T/p.png" --quiet >/dev/null 2>&1
"$BIN" reconstruct "$T/s.npy" -o "$T/p.tiff" --quiet >/dev/null 2>&1
# A 32x32 image is drawn 16 x 16 (512 px, nearest neighbour) with its legend; the scale is in
# the PNG's text, with the pixel size at that scale; the TIFF keeps the native sampling.
[ "$(png_size "$T/p.png")" = 628x554 ] && ok || bad "reconstruct -o p.png is $(png_size "$T/p.png") (want 628x554: 32x32 x 16 + margins)"
[ "$(png_text "$T/p.png" ssb4d:display_scale)" = 16 ] && ok || bad "p.png: display scale '$(png_text "$T/p.png" ssb4d:display_scale)' (want 16)"
px=$(png_text "$T/p.png" ssb4d:pixel_size_A)
awk -v p="$px" 'BEGIN { exit !(p > 0.0228 && p < 0.0230) }' && ok || bad "p.png: pixel size '$px' A (want 0.366 / 16)"
[ "$(tiff_size "$T/p.tiff")" = 32x32 ] && ok || bad "p.tiff is $(tiff_size "$T/p.tiff") (want the native 32x32)"
[ "$(png_colour "$T/p.png")" = 0 ] && ok || bad "phase.png is not greyscale"
[ "$(stat -c %s "$T/p.tiff")" -gt $((32 * 32 * 4)) ] && ok || bad "phase.tiff lost its data"
sz=$(png_size "$T/f/phase.png")
[ -n "$sz" ] && [ "${sz%x*}" -gt 512 ] && [ "${sz#*x}" -gt 512 ] && ok || bad "fit's phase.png is $sz (not >= 512 px with margins?)"
[ "$(png_text "$T/f/phase.png" ssb4d:display_scale)" = 16 ] && ok || bad "fit's phase.png has no display scale 16"
[ "$(tiff_size "$T/f/phase.tiff")" = 32x32 ] && ok || bad "fit's phase.tiff is $(tiff_size "$T/f/phase.tiff") (want the native 32x32)"
sz=$(png_size "$T/r/defocus.png")
[ -n "$sz" ] && [ "${sz%x*}" -gt 512 ] && [ "${sz#*x}" -ge 512 ] && ok || bad "defocus.png is $sz (want >= 512 px and a colour bar)"
[ "$(png_text "$T/r/defocus.png" ssb4d:display_scale)" = 16 ] && ok || bad "defocus.png: no display scale 16 (one 32-px cell)"
# One region: no spread. The bar spans 1 nm about its C10, so the map is mid-grey (it was black),
# the spread is printed, and the labels stay clear of the top and bottom edges (the top one
# touched it); the unit is in the text chunks.
[ "$(png_text "$T/r/defocus.png" ssb4d:unit)" = "C10 nm" ] && ok || bad "defocus.png: no unit 'C10 nm' in its text"
[ "$(png_text "$T/r/defocus.png" ssb4d:note)" = "spread 0 pm" ] && ok ||
    bad "defocus.png: spread '$(png_text "$T/r/defocus.png" ssb4d:note)' (want 'spread 0 pm')"
awk -v r="$(png_text "$T/r/defocus.png" ssb4d:range)" 'BEGIN { split(r, a, " "); d = a[2] - a[1]; exit !(d > 0.999 && d < 1.001) }' &&
    ok || bad "defocus.png: the bar's range '$(png_text "$T/r/defocus.png" ssb4d:range)' does not span 1 nm"
read -r gmin gmax <<<"$(png_grey "$T/r/defocus.png" 0 0 512 512)"
[ "$gmin" -ge 120 ] && [ "$gmax" -le 136 ] && ok || bad "defocus.png: one region drawn $gmin..$gmax (want mid-grey)"
h=${sz#*x} # right of the colour bar (x 521..542 with its frame)
[ "$(png_grey "$T/r/defocus.png" 545 0 "${sz%x*}" 2)" = "255 255" ] &&
    [ "$(png_grey "$T/r/defocus.png" 545 $((h - 2)) "${sz%x*}" "$h")" = "255 255" ] && ok ||
    bad "defocus.png: a label touches the top or bottom edge"

# --- virtual images: each colour bar names its unit -----------------------------------------------
"$BIN" virtual "$T/s.npy" -o "$T/v" --format png --quiet >/dev/null 2>&1
for fu in virtual_bf:counts virtual_adf:counts com_x:mrad com_y:mrad idpc:rad; do
    f=${fu%%:*} u=${fu#*:}
    [ "$(png_text "$T/v/$f.png" ssb4d:unit)" = "$u" ] && ok ||
        bad "virtual $f.png: unit '$(png_text "$T/v/$f.png" ssb4d:unit)' (want $u)"
done

# --- import reads the sidecar ----------------------------------------------------------------
expect 0 "import records the sidecar's values" "from the sidecar $T/s.json: 300 kV, 25 mrad" -- \
    "$BIN" import "$T/s.npy" -o "$T/s.qem" -q
expect 0 "info shows the sidecar's kV" "kV +300 kV" -- "$BIN" info "$T/s.qem"
grep -qE "semi-angle +25 mrad" "$T/out" && grep -qE "scan step +0.366094 A" "$T/out" && ok ||
    bad "info lacks the sidecar's semi-angle or scan step"
expect 0 "import: a flag replaces the sidecar's value" "kV +200 kV" -- bash -c \
    "'$BIN' import '$T/s.npy' -o '$T/k.qem' -q --kv 200 >/dev/null && '$BIN' info '$T/k.qem'"
cp "$T/s.npy" "$T/bare.npy"
expect 0 "import without a sidecar" "kV +unknown" -- bash -c \
    "'$BIN' import '$T/bare.npy' -o '$T/bare.qem' -q >/dev/null && '$BIN' info '$T/bare.qem'"
expect 0 "import --sidecar" "kV +300 kV" -- bash -c \
    "'$BIN' import '$T/bare.npy' -o '$T/b2.qem' -q --sidecar '$T/s.json' >/dev/null && '$BIN' info '$T/b2.qem'"
echo '{' >"$T/broken.json"
expect 2 "import: a broken sidecar" "not valid JSON" -- "$BIN" import "$T/bare.npy" -o "$T/b3.qem" --sidecar "$T/broken.json"

# --- progress bars on a terminal -------------------------------------------------------------------
if command -v script >/dev/null 2>&1; then
    script -qec "'$BIN' simulate --preset tiny --scan 24 -o '$T/p24.npy'" /dev/null | tr '\r' '\n' >"$T/tty" 2>&1
    grep -qE '^simulate +\[#+\] 100.0%.*positions/s' "$T/tty" && ok || bad "simulate does not draw the shared bar"
    grep -q "positions (" "$T/tty" && bad "simulate still draws its own progress line" || ok
    script -qec "'$BIN' import '$T/s.npy' -o '$T/tty.qem'" /dev/null | tr '\r' '\n' >"$T/tty" 2>&1
    bar=$(grep -E '^import +\[#+\] 100.0%' "$T/tty" | tail -1 | grep -oE '[0-9.]+ MiB/s' | cut -d' ' -f1)
    sum=$(grep -oE 'time +[0-9.]+ s \([0-9.]+ MiB/s' "$T/tty" | grep -oE '[0-9.]+ MiB/s' | cut -d' ' -f1)
    [ -n "$bar" ] && [ "$bar" = "$sum" ] && ok || bad "import's bar says $bar MiB/s, its summary $sum MiB/s"
fi

finish images.sh

#!/usr/bin/python3
"""check_layers.py — the stage folders of src/ form layers; nothing may reach upward.

The layer table is the one in docs/architecture.md ("## Layers"): a folder may include or call
only folders on lower layers (folders on one layer are peers and may not use each other).
Checked:
  includes  every `#include "..."` in src/*/*.c|h, resolved the way the compiler does (the
            including file's folder, then src/ and include/);
  calls     with --objects, every symbol an object of the library leaves undefined and another
            folder's object defines (the public ssb4d.h declares the whole API, so a call between
            stages need not show up as an include).
Fails, printing file:line (or the symbol), on an upward edge, on a cycle between folders, on a
folder missing from the table (or a table entry with no folder) and on an unresolved include.
Clients (CLIENTS: the command line and the viewer) stand on the public API alone: they include
nothing from src/ but their own folder (include/*.h is the door), and, with --objects (give the
clients' objects too), call nothing another folder defines unless include/*.h declares it (the
library's exports, src/libssb4d.map, and the viewer's entry points, include/ssb4d_view.h).
Standard library only: runs with Debian's /usr/bin/python3.

usage: check_layers.py --root SRC_DIR [--nm NM] [--objects OBJ...]
"""
import argparse
import os
import re
import subprocess
import sys

# Edges allowed although they go upward: (from, to) -> why. Empty: every cycle the check found
# when it was written (issue 12) has been removed. An entry that no longer occurs is an error,
# so the list cannot outlive its reason.
ALLOWED = {}

# Folders that are clients of the library: the public headers (include/*.h) are their only door.
CLIENTS = ('cli', 'view')

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
TABLE_ROW = re.compile(r'^\|\s*(\d+)\s*\|\s*`([A-Za-z0-9_]+)/`\s*\|')
OBJECT = re.compile(r'[/\\]src[/\\]([^/\\]+)[/\\]([^/\\]+)\.c\.o(bj)?$')


def read_layers(doc):
    """{folder: layer} from the table under '## Layers' in docs/architecture.md."""
    layers, inside = {}, False
    with open(doc, encoding='utf-8') as f:
        for line in f:
            if line.startswith('## '):
                inside = line.strip() == '## Layers'
                continue
            m = TABLE_ROW.match(line) if inside else None
            if m:
                layers[m.group(2)] = int(m.group(1))
    return layers


def include_edges(root, problems):
    """[(from, to, 'file:line includes X')] for includes that leave their folder."""
    src, edges = os.path.join(root, 'src'), []
    for folder in sorted(os.listdir(src)):
        fdir = os.path.join(src, folder)
        if not os.path.isdir(fdir):
            continue
        for name in sorted(os.listdir(fdir)):
            if not name.endswith(('.c', '.h')):
                continue
            path = os.path.join(fdir, name)
            with open(path, encoding='utf-8', errors='replace') as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc, where = m.group(1), 'src/%s/%s:%d' % (folder, name, n)
                    if os.path.isfile(os.path.join(fdir, inc)):
                        target = os.path.normpath(os.path.join(folder, inc)).split(os.sep)[0]
                    elif os.path.isfile(os.path.join(src, inc)):
                        target = inc.split('/')[0]
                    elif os.path.isfile(os.path.join(root, 'include', inc)):
                        continue  # the public API: below every layer
                    else:
                        problems.append('%s: cannot resolve #include "%s"' % (where, inc))
                        continue
                    if target != folder:
                        edges.append((folder, target, '%s includes "%s"' % (where, inc)))
    return edges


def public_functions(root):
    """Names that the public headers declare as functions (a word before '(', comments removed)."""
    names = set()
    inc = os.path.join(root, 'include')
    for name in sorted(os.listdir(inc)):
        if name.endswith('.h'):
            with open(os.path.join(inc, name), encoding='utf-8') as f:
                text = re.sub(r'/\*.*?\*/', ' ', f.read(), flags=re.S)
            names.update(re.findall(r'\b([A-Za-z_]\w*)\s*\(', text))
    return names


def call_edges(objects, nm):
    """[(from, to, 'src/a/x.c calls f (src/b/y.c)')] from the objects' symbol tables."""
    defined, undefined = {}, []
    for obj in objects:
        m = OBJECT.search(obj)
        if not m:
            continue
        unit = 'src/%s/%s.c' % (m.group(1), m.group(2))
        out = subprocess.run([nm, '-g', obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == 'U':
                undefined.append((m.group(1), unit, parts[1]))
            elif len(parts) == 3:
                defined[parts[2]] = (m.group(1), unit)
    edges = []
    for folder, unit, sym in undefined:
        if sym in defined and defined[sym][0] != folder:
            edges.append((folder, defined[sym][0],
                          '%s calls %s (%s)' % (unit, sym, defined[sym][1])))
    return edges


def find_cycles(graph):
    """Each strongly connected component of more than one folder, as one cycle through it."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):  # Tarjan; the graph has a few dozen nodes, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:  # walk inside the component from its first folder until it closes
        start = min(comp)
        path, seen = [start], {start: 0}
        while True:
            nxt = min(w for w in graph[path[-1]] if w in comp)
            if nxt in seen:
                cycles.append(path[seen[nxt]:] + [nxt])
                break
            seen[nxt] = len(path)
            path.append(nxt)
    return cycles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--nm', default='nm')
    ap.add_argument('--objects', nargs='*', default=[])
    a = ap.parse_args()
    objects = [o for arg in a.objects for o in arg.split(';') if o]  # CMake passes a ;-list
    if a.objects and not any(OBJECT.search(o) for o in objects):
        print('layers: --objects holds no object of src/<folder>/*.c; is ssb4d_lib still the '
              'target that compiles them? (tests/CMakeLists.txt)')
        return 1

    problems = []
    layers = read_layers(os.path.join(a.root, 'docs', 'architecture.md'))
    src = os.path.join(a.root, 'src')
    folders = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)) and
               any(n.endswith(('.c', '.h')) for n in os.listdir(os.path.join(src, d)))}
    for d in sorted(folders - set(layers)):
        problems.append('src/%s/ is not in the layer table of docs/architecture.md' % d)
    for d in sorted(set(layers) - folders):
        problems.append('docs/architecture.md lists %s/, which src/ does not have' % d)

    edges = include_edges(a.root, problems) + call_edges(objects, a.nm)
    public = public_functions(a.root)
    for f, t, why in edges:
        if f not in CLIENTS or t == f:
            continue
        sym = why.split(' calls ')[1].split(' ')[0] if ' calls ' in why else None
        if sym is not None and sym in public:
            continue
        problems.append('%s: a client (src/%s/) may %s' % (
            why, f, 'call only what include/*.h declares' if sym else 'include only include/*.h and its own folder'))
    graph, example, used = {}, {}, set()
    for f, t, why in edges:
        graph.setdefault(f, set()).add(t)
        example.setdefault((f, t), why)
        if f in layers and t in layers and layers[t] >= layers[f]:
            if (f, t) in ALLOWED:
                used.add((f, t))
                continue
            problems.append('%s: %s (layer %d) may not use %s (layer %d)'
                            % (why, f, layers[f], t, layers[t]))
    for f, t in sorted(set(ALLOWED) - used):
        problems.append('allowed exception %s -> %s no longer occurs: remove it' % (f, t))
    for cyc in find_cycles(graph):
        problems.append('cycle: ' + ' -> '.join(cyc) + ''.join(
            '\n    %s' % example[(cyc[i], cyc[i + 1])] for i in range(len(cyc) - 1)))

    for p in problems:
        print('layers: ' + p)
    n_inc = sum(1 for e in edges if 'includes' in e[2])
    print('layers: %d folders, %d cross-folder includes, %d cross-folder calls (%d objects): %s'
          % (len(folders), n_inc, len(edges) - n_inc, len(objects),
             'FAILED' if problems else 'ok'))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

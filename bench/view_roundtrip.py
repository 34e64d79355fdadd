#!/usr/bin/python3
"""view_roundtrip.py — the viewer's round trips as a person feels them: request sent → image bytes
received over HTTP, against a real `ssb4d view DATA` (SPEC §7's speed targets: drag preview at
native sampling on the default drag subset; release = full BF set + exact loss, native sampling).

usage: view_roundtrip.py SSB4D DATA [--drags 20] [--releases 3] [--subset 256] [--memory SIZE]
Prints one line per kind: median, min, max (ms) and the server's own time. Standard library only.
The drags step C10 around the fitted value (each a new value: no cache can answer it); they are
sent one after the other (the person's frame rate is not the limit being measured).
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bin')
    ap.add_argument('data')
    ap.add_argument('--drags', type=int, default=20)
    ap.add_argument('--releases', type=int, default=3)
    ap.add_argument('--subset', type=int, default=256)
    ap.add_argument('--memory')
    a = ap.parse_args()
    cmd = [a.bin, 'view', a.data, '--port', '0', '-q'] + (['--memory', a.memory] if a.memory else [])
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    url = p.stdout.readline().split()[2]
    port, token = int(url.split(':')[2].split('/')[0]), url.split('token=')[1]
    hdr = {'X-SSB4D-Token': token, 'Host': '127.0.0.1:%d' % port}

    def req(method, path, body=None):
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=3600)
        t = time.perf_counter()
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdr)
        r = c.getresponse()
        data = r.read()
        dt = time.perf_counter() - t
        c.close()
        return r.status, dict(r.getheaders()), data, dt

    try:
        while True:
            s = json.loads(req('GET', '/api/state')[2])
            if s['ready'] and not s['job']['busy']:
                break
            time.sleep(0.5)
        print('ready (calibrate + G + fit) after %.1f s; shape %s; %s BF pixels; fit C10 %.3f nm'
              % (time.time() - t0, s['shape'], s['calibration']['n_bf'], s['current']['C10_nm']))
        c10 = s['current']['C10_nm']
        res = {'drag': [], 'release': []}
        n = 0
        for kind, count in (('drag', a.drags), ('release', a.releases)):
            for i in range(count + 1):  # the first of each kind warms up (plans, caches): not counted
                n += 1
                body = {'C10_nm': c10 + 0.05 * n, 'upsample': 1, 'seq': n,
                        'subset': a.subset if kind == 'drag' else 0, 'want_loss': kind == 'release'}
                st, h, data, dt = req('POST', '/api/preview', body)
                if st != 200:
                    sys.exit('preview failed: %d %s' % (st, data[:200]))
                if i:
                    res[kind].append((dt, float(h['X-Seconds']), len(data)))
        for kind, v in res.items():
            ms = [1000 * x[0] for x in v]
            srv = [1000 * x[1] for x in v]
            print('%-8s n=%-3d median %8.1f ms  min %8.1f  max %8.1f  (server median %8.1f ms, %d bytes)'
                  % (kind, len(v), statistics.median(ms), min(ms), max(ms), statistics.median(srv), v[0][2]))
    finally:
        p.terminate()
        p.wait()


if __name__ == '__main__':
    main()

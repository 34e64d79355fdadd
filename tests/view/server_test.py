#!/usr/bin/python3
"""server_test.py — `ssb4d view` against hostile and impatient clients (a real server, real
sockets, the tiny simulated dataset). Standard library + numpy (Debian's /usr/bin/python3).

usage: server_test.py SSB4D_BINARY WORKDIR
Checks: the token (missing 401, wrong 403), a foreign Host (403), no CORS headers; oversized,
truncated and malformed bodies, NaN/Inf/absurd values, unknown fields (4xx, then still serving);
unknown routes and path traversal on static files (404); a client that sends half a request and
stalls does not block others; 1,000 concurrent stale previews (it keeps answering, RSS bounded, the
final request's image equals a fresh one; superseded ones are 204, not errors); region refit; save
(a plain name inside the output folder only; never replacing a file unless the server was started
with --force); --base-url and --allow-host; bound to 127.0.0.1 only; SIGTERM exits 0 with no
partial files.
"""
import concurrent.futures as cf
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np

BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
FAILS = []
VIEW_IDLE_S = 2.0  # src/view/view_internal.h: quiet this long before the server's idle work


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what, flush=True)
    if not cond:
        FAILS.append(what)


def request(port, method, path, body=None, token=None, host=None, headers=None, timeout=300):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    h = {'Host': host or '127.0.0.1:%d' % port}
    if token is not None:
        h['X-SSB4D-Token'] = token
    if headers:
        h.update(headers)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def rss_kb(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    return 0


def start_view(*more, data='x.npy'):
    """A real `ssb4d view DATA` on an ephemeral port: (process, the line it printed, port, token)."""
    p = subprocess.Popen([BIN, 'view', data, '--port', '0', '-q'] + list(more), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    url = line.split(' ', 2)[2] if line.count(' ') >= 2 else ''
    port = int(url.split(':')[2].split('/')[0]) if url else 0
    return p, line, port, url.split('token=')[1] if 'token=' in url else ''


def wait_ready(port, token, prefix=''):
    for _ in range(3000):
        s = json.loads(request(port, 'GET', prefix + '/api/state', token=token)[2])
        if s['ready'] and not s['job']['busy']:
            return s
        time.sleep(0.1)
    return s


def save_and_prefix(work):
    """Save only inside the output folder, replacing only under --force; routes under --base-url,
    a proxy's Host under --allow-host."""
    out = os.path.join(work, 'out')
    os.makedirs(out, exist_ok=True)
    outside = os.path.join(work, 'mine.json')
    with open(outside, 'w') as f:
        f.write('the user\'s file\n')
    r = subprocess.run([BIN, 'view', 'x.npy', '--port', '0', '-q', '-o', os.path.join(work, 'nope')],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and 'output folder' in r.stderr, 'view -o a missing folder: exit 2 (%s)'
          % r.stderr.strip())
    prefix = '/user/me/proxy/8765'
    p, line, port, token = start_view('--no-fit', '-o', out, '--base-url', prefix + '/', '--allow-host',
                                      'hub.example.org')
    try:
        check(('127.0.0.1:%d%s/?token=' % (port, prefix)) in line, 'base URL in the printed URL: ' + line)
        wait_ready(port, token, prefix)
        st, h, body = request(port, 'GET', prefix + '/')
        check(st == 200 and b'app.js' in body, 'page under the prefix: %d' % st)
        check(request(port, 'GET', prefix + '/app.js')[0] == 200, 'app.js under the prefix')
        check(request(port, 'GET', prefix + '/favicon.svg')[0] == 200, 'favicon under the prefix')
        st, h, _ = request(port, 'GET', prefix + '?token=' + token)
        check(st == 302 and h.get('Location') == prefix + '/?token=' + token, 'the prefix alone: 302 to PREFIX/ (%d %s)'
              % (st, h.get('Location')))
        check(request(port, 'GET', '/api/state', token=token)[0] == 404, 'a route outside the prefix: 404')
        check(request(port, 'GET', '/')[0] == 404, 'the page outside the prefix: 404')
        check(request(port, 'GET', prefix + '/api/state')[0] == 401, 'no token under the prefix: 401')
        check(request(port, 'GET', prefix + '/api/state', token=token)[0] == 200, 'state under the prefix')
        for host, want in [('hub.example.org', 200), ('hub.example.org:443', 200), ('HUB.example.org:8000', 200),
                           ('hub.example.org.evil.com', 403), ('evil.example', 403), ('hub.example.org:x', 403)]:
            st = request(port, 'GET', prefix + '/api/state', token=token, host=host)[0]
            check(st == want, 'Host %s under --allow-host: %d (want %d)' % (host, st, want))
        api = prefix + '/api/save'
        for what, body in [('absolute path', {'name': outside}), ('.. path', {'name': '../mine.json'}),
                           ('folder', {'name': 'sub/c.json'}), ('hidden', {'name': '.c.json'}),
                           ('not .json', {'name': 'c.txt'}), ('empty', {'name': ''}), ('backslash', {'name': '..\\c.json'}),
                           ('old field, absolute', {'path': outside, 'force': True}), ('control byte', {'name': 'c\n.json'}),
                           ('long', {'name': 'x' * 300 + '.json'})]:
            st, _, b = request(port, 'POST', api, body=body, token=token)
            check(st == 400 and b'error' in b, 'save refuses %s: %d %s' % (what, st, b[:90].decode(errors='replace')))
        check(open(outside).read() == 'the user\'s file\n', 'the file outside the output folder is untouched')
        st, _, b = request(port, 'POST', api, body={}, token=token)
        got = json.loads(b).get('path', '')
        check(st == 200 and got == os.path.join(out, 'calibration.json') and os.path.exists(got),
              'save writes into the output folder and says where: %s' % got)
        st, _, b = request(port, 'POST', api, body={'name': 'calibration.json', 'force': True}, token=token)
        check(st == 409 and b'--force' in b, 'no --force: an existing file is never replaced, even asked (%d %s)'
              % (st, b[:100].decode(errors='replace')))
        os.symlink(outside, os.path.join(out, 'link.json'))
        st, _, b = request(port, 'POST', api, body={'name': 'link.json'}, token=token)
        check(st == 409 and open(outside).read() == 'the user\'s file\n', 'save does not write through a link: %d' % st)
        st, _, b = request(port, 'POST', api, body={'name': 'run2.json'}, token=token)
        check(st == 200 and os.path.exists(os.path.join(out, 'run2.json')), 'save under a plain name')
    finally:
        check(stop(p) == 0, 'SIGTERM: exits 0 (prefix server)')
    p, line, port, token = start_view('--no-fit', '-o', out, '--force')
    try:
        wait_ready(port, token)
        before = os.path.getmtime(os.path.join(out, 'calibration.json'))
        time.sleep(0.05)
        st, _, b = request(port, 'POST', '/api/save', body={'name': 'calibration.json'}, token=token)
        check(st == 409 and b'replace' in b, 'with --force, an existing file still needs the request to ask (%d)' % st)
        st, _, b = request(port, 'POST', '/api/save', body={'name': 'calibration.json', 'force': True}, token=token)
        check(st == 200 and os.path.getmtime(os.path.join(out, 'calibration.json')) >= before,
              'with --force and the request asking, save replaces (%d)' % st)
    finally:
        check(stop(p) == 0, 'SIGTERM: exits 0 (--force server)')


def stop(p, sig=signal.SIGTERM):
    """Sends sig (unless p has ended) and waits: its exit status, or 'hung' (killed) after 20 s."""
    if p.poll() is None:
        p.send_signal(sig)
    try:
        return p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        return 'hung'


def regions_unsettled():
    """Fit Regions where no cell settles the 180 deg branch (a Au wedge 1.6 to 2 nm thick all over,
    the rotation searched: tests/python/test_regions_branch.py's case): branch_region null and
    branch_unsettled true, as `ssb4d fit-regions` warns; a 1x1 grid has nothing to settle."""
    subprocess.run([BIN, 'simulate', '--preset', 'tiny', '--specimen', 'au', '--scan', '64', '--scan-cells', '6',
                    '--scan-rotation', '200', '--wedge', '1.6:2', '--threads', '2', '-q', '-o', 'thick.npy'],
                   check=True)
    os.remove('thick.json')  # the rotation is not given
    p, _, port, token = start_view('--no-fit', '--kv', '300', '--semiangle', '25', '--scan-step', '0.3823125',
                                   '--threads', '2', data='thick.npy')
    try:
        wait_ready(port, token)
        st, _, body = request(port, 'POST', '/api/regions', body={'rows': 1, 'cols': 2}, token=token)
        a = json.loads(body) if st == 200 else {}
        check(st == 200 and a.get('branch_region', 0) is None and a.get('branch_unsettled') is True
              and all(c.get('rotation_set_by', 0) is None for c in a['cells']),
              'Fit Regions, no cell settles the branch: %d, branch_unsettled %s' % (st, a.get('branch_unsettled')))
        st, _, body = request(port, 'POST', '/api/regions', body={'rows': 1, 'cols': 1}, token=token)
        check(st == 200 and json.loads(body).get('branch_unsettled') is False,
              'Fit Regions 1x1: nothing to settle (%d)' % st)
    finally:
        check(stop(p) == 0, 'SIGTERM after Fit Regions: exit 0')
        err = p.stderr.read()
        check('Sanitizer' not in err and 'runtime error' not in err, 'no sanitizer report (regions)')
    os.remove('thick.npy')


def main():
    work = os.path.join(WORK, 'view_server_test')
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)
    subprocess.run([BIN, 'simulate', '--preset', 'tiny', '-o', 'x.npy', '-q'], check=True)
    t_start = time.time()
    p, line, port, token = start_view()
    check(line.startswith('ssb4d view: http://127.0.0.1:') and '?token=' in line, 'prints the URL: ' + line)
    check(len(token) == 32 and all(ch in '0123456789abcdef' for ch in token), 'token is 32 hex digits')
    try:
        run(p, port, token)
        r = subprocess.run([BIN, 'view', 'x.npy', '--port', str(port), '-q'], capture_output=True, text=True,
                           timeout=300)
        check(r.returncode == 2 and 'cannot listen' in r.stderr,
              'a second view on the same port: exit 2 (%s)' % r.stderr.strip())
    finally:
        rc = stop(p)
        check(rc == 0, 'SIGTERM: exits 0 (got %s)' % rc)
        err = p.stderr.read()
        check('Sanitizer' not in err and 'runtime error' not in err, 'no sanitizer report')
        left = [f for f in os.listdir(work) if f not in ('x.npy', 'x.json', 'x_phase.npy',
                                                          'x_phase_bandlimited.npy', 'cal.json', 'bv.json')]
        check(not left, 'no partial files left: %s' % left)
    save_and_prefix(work)
    regions_unsettled()
    # ssb4d bench view: the round trips over HTTP, as a record.
    r = subprocess.run([BIN, 'bench', 'view', '--data', 'x.npy', '--drags', '3', '--releases', '1', '-o', 'bv.json',
                        '--drag-rate', '20', '--drag-seconds', '1', '--cpu-load', '1', '-q'],
                       capture_output=True, text=True, timeout=600)
    rec = json.load(open('bv.json')) if r.returncode == 0 else {}
    check(r.returncode == 0 and rec.get('schema') == 'ssb4d-bench-view/1' and rec['drag']['n'] == 3
          and rec['release']['median_ms'] > 0, 'bench view: %s' % (r.stdout.strip().splitlines()[-1:] or r.stderr))
    sr = rec.get('stream', {})
    check(sr.get('drags_sent') == 20 and sr.get('drags_drawn', 0) >= 1 and sr.get('largest_gap_ms', 0) > 0
          and sr.get('release_during_drag_ms', 0) > 0 and rec.get('cpu_load') == 1,
          'bench view --drag-rate --cpu-load: %s' % json.dumps(sr)[:300])
    time.sleep(0.5)
    busy = subprocess.run(['pgrep', '-f', '-c', '^ssb4d bench view'], capture_output=True, text=True).stdout.strip()
    check(busy in ('', '0'), 'the CPU load stopped with the bench (%s left)' % busy)

    # Ctrl-C while the fit on start runs: the call is cancelled, exit 0, promptly.
    q = start_view()[0]
    t0 = time.time()
    rc = stop(q, signal.SIGINT)
    check(rc == 0 and time.time() - t0 < 3, 'SIGINT during the fit on start: exit %s in %.2f s'
          % (rc, time.time() - t0))

    # /api/cancel while the start-up runs (calibrate, then the fit): whichever call it lands in, or
    # between them, the fit does not complete and the session stays usable.
    q, _, qport, qtoken = start_view()
    try:
        t0 = time.time()
        while time.time() - t0 < 300:
            request(qport, 'POST', '/api/cancel', body={}, token=qtoken)
            state = json.loads(request(qport, 'GET', '/api/state', token=qtoken)[2])
            if not state['job']['busy'] and time.time() - t0 > 0.2:
                break
            time.sleep(0.01)
        check(not state['fit']['done'], 'cancel during the start-up: no fit (%s)' % state['error'])
        st, _, _ = request(qport, 'POST', '/api/preview', body={'C10_nm': 1}, token=qtoken)
        check(st == 200, 'after a cancelled start-up a preview answers %d' % st)
    finally:
        rc = stop(q)
    check(rc == 0, 'SIGTERM after a cancelled start-up: exit %s' % rc)
    print('server test: %.1f s' % (time.time() - t_start))


def run(p, port, token):
    # Ready: the fit on start has finished.
    for _ in range(3000):
        st, _, body = request(port, 'GET', '/api/state', token=token)
        s = json.loads(body)
        if s['ready'] and not s['job']['busy']:
            break
        time.sleep(0.1)
    t_ready = time.time()
    check(s['fit']['done'], 'fit on start finished: C10 %.3f nm' % s['fit']['result']['C10_nm'])
    se = s['fit']['standard_errors']
    check(0 < se['C10_nm'] < 1 and 0 < se['C12_nm'] < 1 and se['rotation_deg'] is None,
          'the fit\'s standard errors: %s' % se)

    # Idle, nothing runs: the worker waits on a condition variable, the daemon in poll(). The
    # server's own idle work (the virtual images) starts VIEW_IDLE_S = 2 s after the last request
    # or the start-up's end, so this window is 1 s; the 2.5 s window comes after the virtual
    # images exist.
    def cpu_ticks():
        with open('/proc/%d/stat' % p.pid) as f:
            a = f.read().rsplit(')', 1)[1].split()
        return int(a[11]) + int(a[12])
    t = cpu_ticks()
    time.sleep(1)
    d = cpu_ticks() - t
    late = time.time() - t_ready
    if late < VIEW_IDLE_S - 0.2:
        check(d <= 2, 'idle before the idle work: no CPU used in 1 s (%d ticks)' % d)
    else:  # this process was held up past the quiet time: the idle work may have begun
        print('note the window before the idle work ended %.2f s after ready: not measured' % late)

    # Bound to 127.0.0.1 only: /proc/net/tcp lists the listening socket's local address.
    listen = []
    with open('/proc/net/tcp') as f:
        for ln in f.readlines()[1:]:
            a = ln.split()
            if a[3] == '0A' and int(a[1].split(':')[1], 16) == port:
                listen.append(a[1].split(':')[0])
    check(listen == ['0100007F'], 'listens on 127.0.0.1 only: %s' % listen)
    check(not any(ln.split()[1].endswith(':%04X' % port) for ln in open('/proc/net/tcp6').readlines()[1:]),
          'no IPv6 listener')

    # The token and the Host.
    check(request(port, 'GET', '/api/state')[0] == 401, 'no token: 401')
    check(request(port, 'GET', '/api/state', token='0' * 32)[0] == 403, 'wrong token: 403')
    check(request(port, 'GET', '/api/state', token=token[:-1])[0] == 403, 'short token: 403')
    check(request(port, 'GET', '/api/state', token=token, host='evil.example:%d' % port)[0] == 403,
          'foreign Host: 403')
    check(request(port, 'GET', '/', host='evil.example')[0] == 403, 'foreign Host on the page: 403')
    check(request(port, 'GET', '/api/state', token=token, host='localhost:%d' % port)[0] == 200,
          'Host localhost:PORT: 200')
    st, h, _ = request(port, 'GET', '/api/state', token=token, headers={'Origin': 'http://evil.example'})
    check(not any(k.lower().startswith('access-control') for k in h), 'no CORS headers')
    st, h, _ = request(port, 'OPTIONS', '/api/preview', token=token, headers={'Origin': 'http://evil.example'})
    check(st >= 400 and not any(k.lower().startswith('access-control') for k in h), 'OPTIONS refused (%d)' % st)

    # Static files: a fixed list, no traversal.
    st, h, body = request(port, 'GET', '/')
    check(st == 200 and b'app.js' in body and "default-src 'self'" in h.get('Content-Security-Policy', ''),
          'page served with its CSP')
    check(request(port, 'GET', '/app.js')[0] == 200, 'app.js served')
    for path in ['/../CMakeLists.txt', '/%2e%2e/%2e%2e/etc/passwd', '/web/../CMakeLists.txt', '//etc/passwd',
                 '/..%2fsrc%2fview%2fapi.c', '/app.js/', '/index.html%00', '/nope']:
        st, _, body = request(port, 'GET', path)
        check(st in (400, 404) and b'root:' not in body, 'static %s: %d' % (path, st))
    check(request(port, 'GET', '/api/nope', token=token)[0] == 404, 'unknown route: 404')
    check(request(port, 'GET', '/api/preview', token=token)[0] == 405, 'GET on a POST route: 405')

    # Hostile bodies.
    bad = {
        'not JSON': 'hello',
        'truncated JSON': '{"C10_nm": 1',
        'trailing bytes': '{"C10_nm": 1} x',
        'array': '[1, 2]',
        'NaN': '{"C10_nm": NaN}',
        'Infinity': '{"C10_nm": Infinity}',
        '1e999': '{"C10_nm": 1e999}',
        'absurd C10': '{"C10_nm": 1e30}',
        'string number': '{"C10_nm": "3"}',
        'unknown field': '{"C10_nm": 1, "evil": 2}',
        'duplicate field': '{"C10_nm": 1, "C10_nm": 2}',
        'upsample 5': '{"upsample": 5}',
        'negative subset': '{"subset": -1}',
        'fractional subset': '{"subset": 2.5}',
        'bad view': '{"view": "../../etc"}',
        'bad aberration': '{"aberr": {"C99_nm": 1}}',
        'absurd C30': '{"aberr": {"C30_nm": 1e300}}',
        'phi of a round aberration': '{"aberr": {"phi30_deg": 1}}',
        'lower-case aberration': '{"aberr": {"c30_nm": 1}}',
        'bad tilt': '{"tilt_mrad": [1]}',
        'negative thickness': '{"thickness_nm": -1}',
        'NUL byte': '{"C10_nm": 1}\x00',
    }
    for what, b in bad.items():
        st, _, body = request(port, 'POST', '/api/preview', body=b, token=token)
        check(st == 400 and b'error' in body, 'preview %s: %d %s' % (what, st, body[:80].decode(errors='replace')))
    for path, b in [('/api/region', '{"rect": [0, 10, 0, 99999]}'), ('/api/region', '{"rect": [5, 5, 0, 10]}'),
                    ('/api/region', '{}'), ('/api/regions', '{"rows": 0}'), ('/api/regions', '{"rows": 1e9}'),
                    ('/api/save', '{"path": 3}'), ('/api/save', '{"force": "yes"}'), ('/api/fit', '{"x": 1}'),
                    ('/api/apply', '{"rotation_deg": 1e99}')]:
        st, _, body = request(port, 'POST', path, body=b, token=token)
        check(st == 400, '%s %s: %d' % (path, b, st))
    st, _, _ = request(port, 'POST', '/api/preview', body='{"C10_nm": 1, "pad": "%s"}' % ('x' * 70000), token=token)
    check(st == 413, 'oversized body: %d' % st)
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(('POST /api/preview HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-SSB4D-Token: %s\r\n'
               'Content-Length: 100000000\r\n\r\n' % (port, token)).encode())
    check(b' 413 ' in s.recv(4096), 'huge Content-Length: 413 before the body')
    s.close()
    s = socket.create_connection(('127.0.0.1', port))  # a body shorter than announced, then gone
    s.sendall(('POST /api/preview HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-SSB4D-Token: %s\r\n'
               'Content-Length: 100\r\n\r\n{"C10_nm": 1' % (port, token)).encode())
    s.close()

    # A client that sends half a request and stalls does not block the others.
    stalled = socket.create_connection(('127.0.0.1', port))
    stalled.sendall(('POST /api/preview HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-SSB4D-Token: %s\r\n'
                     'Content-Length: 50\r\n\r\n{"C10' % (port, token)).encode())
    stalled2 = socket.create_connection(('127.0.0.1', port))
    stalled2.sendall(b'GET /api/sta')
    t0 = time.time()
    st, _, _ = request(port, 'GET', '/api/state', token=token, timeout=5)
    st2, _, _ = request(port, 'POST', '/api/preview', body={'C10_nm': -9, 'seq': 1}, token=token, timeout=10)
    check(st == 200 and st2 == 200 and time.time() - t0 < 5,
          'stalled clients do not block others (%.2f s)' % (time.time() - t0))

    # 1,000 concurrent stale previews (the file-descriptor limit allowing), then the final one.
    rss0 = rss_kb(p.pid)
    n = min(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2 - 50)

    def one(i):
        body = {'C10_nm': -20 + 0.05 * i, 'C12_nm': 2, 'phi12_deg': 20, 'upsample': 2, 'want_loss': True,
                'seq': i}
        try:
            return request(port, 'POST', '/api/preview', body=body, token=token, timeout=120)[0]
        except Exception as e:  # noqa: BLE001
            return str(e)
    t0 = time.time()
    with cf.ThreadPoolExecutor(max_workers=n) as ex:
        futs = [ex.submit(one, i) for i in range(n)]
        time.sleep(0.2)
        st, _, _ = request(port, 'GET', '/api/state', token=token, timeout=5)
        check(st == 200, 'state answers during the burst')
        codes = [f.result() for f in futs]
    final = {'C10_nm': -9.5, 'C12_nm': 2, 'phi12_deg': 20, 'upsample': 2, 'want_loss': True, 'seq': 100000}
    st, h, img = request(port, 'POST', '/api/preview', body=final, token=token)
    burst_s = time.time() - t0
    ok = sum(c == 200 for c in codes)
    sup = sum(c == 204 for c in codes)
    check(ok + sup == n, 'burst: every stale request answered 200 or 204 (%d, %d, others %s)'
          % (ok, sup, [c for c in codes if c not in (200, 204)][:3]))
    check(sup > 0, 'burst: stale requests were superseded (%d of %d), %.1f s' % (sup, n, burst_s))
    check(st == 200 and h.get('X-Seq') == '100000', 'final request answered with its own seq')
    st2, h2, img2 = request(port, 'POST', '/api/preview', body=dict(final, seq=100001), token=token)
    st3, h3, _ = request(port, 'POST', '/api/preview', body=dict(final, seq=99999), token=token)
    check(st3 == 204 and h3.get('X-Superseded') == '1', 'an older seq arriving late is answered 204 (%d)' % st3)
    check(st2 == 200 and img == img2 and h['X-Loss'] == h2['X-Loss'],
          'final image equals a fresh one bit for bit (%d x %s)' % (len(img), h.get('X-Width')))
    a = np.frombuffer(img, '<f4')
    check(a.size == int(h['X-Width']) * int(h['X-Height']) and np.isfinite(a).all() and a.std() > 0,
          'final image: float32, finite, not flat')
    rss1 = rss_kb(p.pid)
    check(rss1 - rss0 < 150 * 1024, 'RSS bounded: %d MiB -> %d MiB' % (rss0 // 1024, rss1 // 1024))
    s = json.loads(request(port, 'GET', '/api/state', token=token)[2])
    check(s['stats']['superseded'] + s['stats']['stale'] >= sup, 'state counts superseded and late previews (%d + %d)'
          % (s['stats']['superseded'], s['stats']['stale']))

    # Higher orders reach the image.
    st, _, b0 = request(port, 'POST', '/api/preview', body={}, token=token)
    st1, _, b1 = request(port, 'POST', '/api/preview', body={'aberr': {'C30_nm': 20000, 'C32_nm': 500, 'phi32_deg': 10}},
                         token=token)
    check(st == 200 and st1 == 200 and b0 != b1, 'higher orders (C30, C32, phi32) change the preview')

    # FFT and amplitude views.
    for view in ('fft', 'amplitude'):
        st, h, b = request(port, 'POST', '/api/preview', body={'view': view}, token=token)
        a = np.frombuffer(b, '<f4')
        check(st == 200 and np.isfinite(a).all() and a.std() > 0, 'view %s' % view)

    # Region refit, apply, cancel, save.
    st, _, b = request(port, 'POST', '/api/region', body={'rect': [0, 16, 0, 16]}, token=token)
    check(st == 400, 'region smaller than 32x32: 400 (%s)' % b[:80])
    st, _, b = request(port, 'POST', '/api/region', body={'rect': [0, 32, 0, 32]}, token=token)
    r = json.loads(b)
    check(st == 200 and abs(r['C10_nm'] + 9.9) < 0.5, 'region refit: C10 %.3f' % r.get('C10_nm', float('nan')))
    st, _, b = request(port, 'POST', '/api/apply', body={'region': True}, token=token)
    check(st == 200 and abs(json.loads(b)['current']['C10_nm'] - r['C10_nm']) < 1e-9, 'apply the region refit')
    check(request(port, 'POST', '/api/cancel', body={}, token=token)[0] == 200, 'cancel while idle: 200')
    st, _, b = request(port, 'POST', '/api/reset', body={}, token=token)
    s = json.loads(b)
    check(st == 200 and s['current']['C10_nm'] == s['fit']['result']['C10_nm'], 'reset: back to the fit')
    st, _, b = request(port, 'POST', '/api/fit_tilt', body={}, token=token)
    t = json.loads(b)
    check(st == 200 and 'thickness_nm' in t and len(t['tilt_mrad']) == 2,
          'fit tilt: %s' % b[:120].decode(errors='replace'))
    # A cancel reaches a running fit: /api/fit answers 409 soon after /api/cancel, whenever it
    # lands: in the job before its library call began, or while the job waits behind the server's
    # idle work (`queued`). Each was lost and the fit ran to its end with 200;
    # bench/tools/view_cancel.py shows it on the built-in dataset, where those windows are long
    # enough to hit (on this tiny one the old server passed this too).
    for delay in (0, 0.02, 0.1, 0.3):
        with cf.ThreadPoolExecutor(max_workers=1) as ex:
            fut = ex.submit(request, port, 'POST', '/api/fit', {}, token)
            for _ in range(200):
                time.sleep(0.005)
                s = json.loads(request(port, 'GET', '/api/state', token=token)[2])
                if s['job']['busy'] or s['job']['queued'] > 0:
                    break
            time.sleep(delay)
            t0 = time.time()
            request(port, 'POST', '/api/cancel', body={}, token=token)
            st = fut.result()[0]
        check(st == 409 and time.time() - t0 < 2, 'cancel a running fit %.2f s in: %d after %.2f s'
              % (delay, st, time.time() - t0))
    st, _, _ = request(port, 'POST', '/api/preview', body={}, token=token)
    check(st == 200, 'the session is usable after a cancel')
    request(port, 'POST', '/api/reset', body={}, token=token)
    st, _, b = request(port, 'POST', '/api/save', body={'name': 'cal.json'}, token=token)
    check(st == 200 and os.path.exists('cal.json') and json.loads(b)['path'] == os.path.join(os.getcwd(), 'cal.json'),
          'save writes cal.json into the folder view started in')
    st, _, b = request(port, 'POST', '/api/save', body={'path': os.path.join(os.getcwd(), 'cal.json')}, token=token)
    check(st == 400, 'save refuses an absolute path: %d %s' % (st, b[:100]))
    st, _, b = request(port, 'POST', '/api/save', body={'name': 'cal.json', 'force': True}, token=token)
    check(st == 409, 'save refuses an existing file (no --force): %d %s' % (st, b[:100]))
    # Virtual images: scan-sized float32, BF equal to `ssb4d virtual`'s (the same pass).
    st, h, b = request(port, 'GET', '/api/virtual?kind=bf', token=token)
    bf = np.frombuffer(b, '<f4') if st == 200 else np.zeros(0)
    check(st == 200 and bf.size == 32 * 32 and h.get('X-Unit') == 'counts' and bf.std() > 0,
          'virtual BF: %d, %d values, unit %s' % (st, bf.size, h.get('X-Unit')))
    r = subprocess.run([BIN, 'virtual', 'x.npy', '-o', 'virt', '--format', 'npy', '-q'], capture_output=True, text=True,
                       timeout=300)
    if r.returncode == 0:
        ref = np.load(os.path.join('virt', 'virtual_bf.npy')).astype('<f4').ravel()
        check(np.array_equal(ref, bf), 'virtual BF equals ssb4d virtual\'s')
        shutil.rmtree('virt')
    else:
        check(False, 'ssb4d virtual ran: %s' % r.stderr.strip())
    for kind in ('adf', 'com_x', 'com_y', 'idpc'):
        st, h, b = request(port, 'GET', '/api/virtual?kind=' + kind, token=token)
        a = np.frombuffer(b, '<f4') if st == 200 else np.zeros(0)
        check(st == 200 and a.size == 32 * 32 and np.isfinite(a).all(), 'virtual %s: %d (%s)' % (kind, st, h.get('X-Unit')))
    for q, want in [('/api/virtual', 400), ('/api/virtual?kind=../x', 400), ('/api/virtual?kind=BF', 400)]:
        check(request(port, 'GET', q, token=token)[0] == want, 'virtual %s: %d' % (q, want))
    check(request(port, 'POST', '/api/virtual?kind=bf', body={}, token=token)[0] == 405, 'POST virtual: 405')
    st, h, b = request(port, 'GET', '/api/calibration/mean', token=token)
    check(st == 200 and len(b) == 4 * 48 * 48, 'calibration mean pattern: float32 48x48')
    stalled.close()
    stalled2.close()
    # Idle with nothing left to do (virtual images made): no CPU at all, however long.
    time.sleep(0.2)
    t = cpu_ticks()
    time.sleep(2.5)
    d = cpu_ticks() - t
    check(d <= 2, 'idle: no CPU used in 2.5 s (%d ticks)' % d)


if __name__ == '__main__':
    main()
    if FAILS:
        print('%d check(s) failed' % len(FAILS))
        sys.exit(1)
    print('all checks passed')

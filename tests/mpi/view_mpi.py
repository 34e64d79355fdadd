#!/usr/bin/python3
"""view_mpi.py — `mpirun -np N ssb4d view` (issue 16): rank 0 serves, the other ranks compute.

A real viewer over one process and over N ranks on the same data, driven by HTTP as the page
drives it: the fit on start, a preview with its loss at upsampling 2, a drag preview on a BF
subset, a region refit, then SIGTERM. Every answer of the distributed viewer must equal the
one-process viewer's bit for bit (image bytes, X-Loss, the fits' numbers), and every rank must
exit 0 on SIGTERM. Standard library only.

usage: view_mpi.py SSB4D_BIN MPIEXEC DATA NP
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import time

BIN, MPIEXEC, DATA, NP = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fails = 0


def check(cond, what):
    global fails
    print(('ok   ' if cond else 'FAIL ') + what, flush=True)
    fails += 0 if cond else 1


def request(port, method, path, token, body=None, timeout=600):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    h = {'Host': '127.0.0.1:%d' % port, 'X-SSB4D-Token': token}
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    url = line.split(' ', 2)[2] if line.count(' ') >= 2 else ''
    port = int(url.split(':')[2].split('/')[0]) if url else 0
    token = url.split('token=')[1] if 'token=' in url else ''
    return p, port, token, line


def drive(port, token):
    """The answers a page would get, without the wall times."""
    out = {}
    for _ in range(6000):
        s = json.loads(request(port, 'GET', '/api/state', token)[2])
        if s['ready'] and not s['job']['busy']:
            break
        time.sleep(0.1)
    fit = dict(s['fit']['result'])
    fit.pop('seconds', None)
    out['fit'] = fit
    for name, body in [('preview', {'C10_nm': -9.5, 'C12_nm': 2, 'phi12_deg': 20, 'upsample': 2, 'want_loss': True}),
                       ('drag', {'C10_nm': -8.0, 'subset': 300, 'want_loss': True}),
                       ('object', {'C10_nm': -8.5, 'estimator': 'object'})]:
        st, h, img = request(port, 'POST', '/api/preview', token, body)
        out[name] = (st, h.get('X-Loss'), h.get('X-Width'), img)
    st, _, b = request(port, 'POST', '/api/region', token, {'rect': [0, 32, 0, 32]})
    reg = json.loads(b) if st == 200 else {'status': st}
    reg.pop('seconds', None)
    if isinstance(reg.get('result'), dict):
        reg['result'].pop('seconds', None)
    out['region'] = reg
    return out


def rank0(p, rank=0):
    """The pid of a rank among mpirun's children (OMPI_COMM_WORLD_RANK in its environment)."""
    for d in os.listdir('/proc'):
        try:
            if not d.isdigit() or int(open('/proc/%s/stat' % d).read().rsplit(')', 1)[1].split()[1]) != p.pid:
                continue
            if b'OMPI_COMM_WORLD_RANK=%d\0' % rank in open('/proc/%s/environ' % d, 'rb').read():
                return int(d)
        except (OSError, ValueError, IndexError):
            pass
    return None


def stop(p, pid=None):
    """SIGTERM to pid (rank 0 of a distributed viewer: mpirun itself ends a job it is signalled
    with status 1, docs/scale.md) or to p; p's exit status, or 'hung'."""
    if p.poll() is None:
        if pid:
            os.kill(pid, signal.SIGTERM)
        else:
            p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        return 'hung'


env_cmd = [MPIEXEC, '--allow-run-as-root', '--oversubscribe', '--bind-to', 'none', '-x', 'ASAN_OPTIONS', '-x',
           'LSAN_OPTIONS', '-np', str(NP)]
one, port1, tok1, line1 = start([BIN, 'view', DATA, '--port', '0', '-q', '--threads', '1'])
many, portn, tokn, linen = start(env_cmd + [BIN, 'view', DATA, '--port', '0', '-q', '--threads', '1'])
check(port1 > 0 and portn > 0, 'both viewers print their URL (%s | %s)' % (line1, linen))
try:
    a = drive(port1, tok1) if port1 else {}
    b = drive(portn, tokn) if portn else {}
    check(a.get('fit') == b.get('fit'), 'fit on start: the same numbers (%s)' % a.get('fit', {}).get('C10_nm'))
    for k in ('preview', 'drag', 'object'):
        check(k in a and a[k][0] == 200 and a[k] == b.get(k),
              '%s: status, X-Loss %s and %s image bytes equal at np %d' % (k, a.get(k, (0, None))[1],
                                                                            len(a.get(k, (0, 0, 0, b''))[3]), NP))
    check(a.get('region') == b.get('region'), 'region refit: the same result')
finally:
    t0 = time.time()
    rc1, rcn = stop(one), stop(many, rank0(many))
    check(rc1 == 0 and rcn == 0, 'SIGTERM to rank 0: every rank exits 0 (%s, %s) in %.1f s' % (rc1, rcn, time.time() - t0))
    err = many.stderr.read()
    check('Sanitizer' not in err and 'runtime error' not in err, 'no sanitizer report' + ('' if 'Sanitizer' not in err
                                                                                          else ': ' + err[-2000:]))

# A rank killed (SIGKILL) while the job runs: mpirun ends every rank within seconds, non-zero.
dead, port, tok, line = start(env_cmd + [BIN, 'view', DATA, '--port', '0', '-q', '--threads', '1', '--no-fit'])
victim = rank0(dead, NP - 1) if port else None
check(victim is not None, 'found rank %d of the second job' % (NP - 1))
t0 = time.time()
if victim:
    os.kill(victim, signal.SIGKILL)
try:
    rc = dead.wait(timeout=60)
except subprocess.TimeoutExpired:
    dead.kill()
    rc = 'hung'
check(rc not in (0, 'hung') and time.time() - t0 < 30,
      'rank %d killed: the job ends with status %s in %.1f s' % (NP - 1, rc, time.time() - t0))
sys.exit(1 if fails else 0)

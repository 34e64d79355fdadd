#!/usr/bin/python3
"""How promptly the viewer's Cancel ends a fit, by when it lands: starts `ssb4d view` on the
built-in dataset (fit on start), runs one whole fit, then for each delay sends /api/fit, waits the
delay and sends /api/cancel, and prints the fit's answer (409: cancelled; 200: it ran to its end)
and how long after the cancel it came. Right after a fit the server's idle pass (the virtual
images) runs, so the first delays land while the fit waits behind it.

    /usr/bin/python3 bench/tools/view_cancel.py build/ssb4d [more `ssb4d view` flags]
"""
import http.client
import json
import subprocess
import sys
import threading
import time


def main():
    binary, more = sys.argv[1], sys.argv[2:]
    p = subprocess.Popen([binary, 'view', '--port', '0', '-q'] + more, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    url = p.stdout.readline().strip().split(' ', 2)[-1]
    port, token = int(url.split(':')[2].split('/')[0]), url.split('token=')[1]

    def request(method, path, body=None):
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={'X-SSB4D-Token': token, 'Host': '127.0.0.1:%d' % port,
                           'Content-Type': 'application/json'})
        r = c.getresponse()
        return r.status, r.read()

    try:
        while True:
            s = json.loads(request('GET', '/api/state')[1])
            if s['ready'] and not s['job']['busy']:
                break
            time.sleep(0.2)
        t0 = time.time()
        st, _ = request('POST', '/api/fit', {})
        print('a whole fit: %d in %.2f s' % (st, time.time() - t0), flush=True)
        for delay in (0.05, 0.2, 0.5, 1, 2, 3, 5):
            out = {}

            def fit():
                out['status'] = request('POST', '/api/fit', {})[0]
                out['t'] = time.time()

            th = threading.Thread(target=fit)
            th.start()
            time.sleep(delay)
            tc = time.time()
            request('POST', '/api/cancel', {})
            th.join()
            print('cancel %.2f s after the request: %d, %.3f s after the cancel' % (delay, out['status'], out['t'] - tc),
                  flush=True)
    finally:
        p.terminate()
        p.wait()


if __name__ == '__main__':
    main()

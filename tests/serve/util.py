#!/usr/bin/env python3
"""tests/serve/util.py - the clients tests/serve/run.sh needs beyond curl
(Python's standard library only).

  util.py pngs RESP.json PREFIX        the response's images as PREFIX0.png...; prints the count
  util.py infotexts RESP.json PREFIX   each PNG's `parameters` chunk equals info's infotexts[i]
  util.py get RESP.json KEY...         prints a field (KEY path; info is JSON-decoded)
  util.py burst PORT N                 a long job, then N concurrent small ones: prints the codes
  util.py many PORT N PID              N small requests (4 at a time): prints VmRSS before/after
  util.py slow PORT headers|body S     a client sending a byte a second: prints how it ended
  util.py leave PORT                   a client that leaves mid-generation
  util.py progress PORT                a long job seen by /progress, then interrupted
  util.py polled PORT OUT.json         a job polled by /progress all along (previews decoded)
"""
import base64
import http.client
import json
import socket
import struct
import sys
import threading
import time
import zlib


def load(path):
    with open(path, "rb") as f:
        return json.load(f)


def images(r):
    if "images" in r:
        return r["images"]
    return [d["b64_json"] for d in r["data"]]


def png_text(data):
    """the tEXt chunks of a PNG, checking every CRC"""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, text = 8, {}
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        crc = struct.unpack(">I", data[at + 8 + n:at + 12 + n])[0]
        assert zlib.crc32(kind + body) == crc, "bad CRC"
        if kind == b"tEXt":
            k, v = body.split(b"\0", 1)
            text[k.decode("latin-1")] = v.decode("latin-1")
        at += 12 + n
    return text


def post(port, path, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def small(seed):
    return {"prompt": "a small fox", "steps": 1, "seed": seed, "width": 16, "height": 16}


LONG = {"prompt": "a long job", "steps": 150, "seed": 1, "width": 64, "height": 64}


def wait_running(port, limit=60):
    t = time.time()
    while time.time() - t < limit:
        _, p = get(port, "/sdapi/v1/progress")
        if p["state"]["sampling_step"] > 0:
            return p
        time.sleep(0.05)
    raise SystemExit("the long job never showed progress")


def main():
    cmd = sys.argv[1]
    if cmd == "pngs":
        imgs = images(load(sys.argv[2]))
        for i, b in enumerate(imgs):
            with open("%s%d.png" % (sys.argv[3], i), "wb") as f:
                f.write(base64.b64decode(b))
        print(len(imgs))
    elif cmd == "infotexts":
        r = load(sys.argv[2])
        texts = json.loads(r["info"])["infotexts"]
        imgs = images(r)
        assert len(texts) == len(imgs) > 0, (len(texts), len(imgs))
        for i, b in enumerate(imgs):
            got = png_text(base64.b64decode(b)).get("parameters")
            assert got == texts[i], (got, texts[i])
        print("%d infotexts equal" % len(imgs))
    elif cmd == "get":
        v = load(sys.argv[2])
        for k in sys.argv[3:]:
            v = v[int(k)] if isinstance(v, list) else v[k]
            if isinstance(v, str) and v.startswith("{"):
                v = json.loads(v)
        print(v if not isinstance(v, (dict, list)) else json.dumps(v))
    elif cmd == "burst":
        port, n = int(sys.argv[2]), int(sys.argv[3])
        codes, lock = [], threading.Lock()
        long_code = []
        lt = threading.Thread(target=lambda: long_code.append(post(port, "/sdapi/v1/txt2img", LONG)[0]))
        lt.start()
        wait_running(port)

        def one(k):
            s, data = post(port, "/sdapi/v1/txt2img", small(100 + k))
            ok = s != 200 or len(json.loads(data)["images"]) == 1
            with lock:
                codes.append(s if ok else -s)
        ts = [threading.Thread(target=one, args=(k,)) for k in range(n)]
        for t in ts:
            t.start()
        t0 = time.time()
        while time.time() - t0 < 120:   # the refusals come at once; then the long job stops
            with lock:
                if len(codes) >= n - 4:
                    break
            time.sleep(0.05)
        post(port, "/sdapi/v1/interrupt", {})
        for t in ts + [lt]:
            t.join()
        print("long %s; %d answered: %d x 200, %d x 429, others %s" % (
            long_code[0], len(codes), codes.count(200), codes.count(429),
            [c for c in codes if c not in (200, 429)]))
    elif cmd == "many":
        port, n, pid = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

        def rss():
            for line in open("/proc/%s/status" % pid):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        bad = []

        def run(count, base):
            def worker(w):
                for k in range(w, count, 4):
                    s, _ = post(port, "/sdapi/v1/txt2img", small(base + k))
                    if s != 200:
                        bad.append(s)
            ts = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        run(100, 1000)           # warm: the allocator's arenas, the pipeline
        before = rss()
        run(n, 5000)
        after = rss()
        print("VmRSS %d kB before, %d kB after %d requests (%+d kB); failed %s" % (
            before, after, n, after - before, bad))
    elif cmd == "slow":
        port, mode, limit = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
        body = json.dumps(small(7)).encode()
        head = ("POST /sdapi/v1/txt2img HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % len(body)).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(2)
        if mode == "body":
            s.sendall(head)
            drip = body
        else:
            drip = head + body
        sent = 0
        for k in range(min(limit, len(drip))):
            try:
                s.sendall(drip[k:k + 1])
                sent += 1
                time.sleep(1)
                s.setblocking(False)
                try:
                    got = s.recv(4096)
                    if got == b"":
                        print("closed by the server after %d bytes" % sent)
                        return
                    print("answered after %d bytes: %s" % (sent, got.split(b"\r\n")[0].decode()))
                    return
                except BlockingIOError:
                    pass
                finally:
                    s.setblocking(True)
                    s.settimeout(2)
            except (BrokenPipeError, ConnectionResetError):
                print("closed by the server after %d bytes" % sent)
                return
        print("still open after %d bytes" % sent)
    elif cmd == "leave":
        port = int(sys.argv[2])
        body = json.dumps(LONG).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(("POST /sdapi/v1/txt2img HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                   % len(body)).encode() + body)
        p = wait_running(port)
        s.close()
        t = time.time()
        while time.time() - t < 120:
            _, q = get(port, "/sdapi/v1/progress")
            if q["state"]["job_count"] == 0:
                print("left at step %d of %d; the job stopped at step %d" % (
                    p["state"]["sampling_step"], p["state"]["sampling_steps"], q["state"]["sampling_step"]))
                return
            time.sleep(0.05)
        print("the job did not stop")
    elif cmd == "progress":
        port = int(sys.argv[2])
        res = []
        lt = threading.Thread(target=lambda: res.append(post(port, "/sdapi/v1/txt2img", LONG)))
        lt.start()
        wait_running(port)
        t = time.time()
        while time.time() - t < 60:   # the step after a poll decodes a preview
            _, p = get(port, "/sdapi/v1/progress")
            if p["current_image"]:
                break
            time.sleep(0.05)
        png = base64.b64decode(p["current_image"] or "")
        size = struct.unpack(">II", png[16:24]) if png[:8] == b"\x89PNG\r\n\x1a\n" else None
        s, _ = post(port, "/sdapi/v1/interrupt", {})
        lt.join()
        err = json.loads(res[0][1])["error"]["message"]
        print("progress %.3f eta %.2f steps %d current_image %s; interrupt %d; the job %d: %s" % (
            p["progress"], p["eta_relative"], p["state"]["sampling_steps"],
            "a %dx%d PNG" % size if size else "none", s, res[0][0], err))
    elif cmd == "polled":
        # a job whose progress is polled (previews decoded meanwhile): its response to a file
        port, out = int(sys.argv[2]), sys.argv[3]
        res = []
        body = {"prompt": "a polled job", "steps": 30, "seed": 5, "width": 64, "height": 64}
        lt = threading.Thread(target=lambda: res.append(post(port, "/sdapi/v1/txt2img", body)))
        lt.start()
        previews = 0
        while lt.is_alive():
            _, p = get(port, "/sdapi/v1/progress")
            previews += p["current_image"] is not None
            time.sleep(0.02)
        lt.join()
        with open(out, "wb") as f:
            f.write(res[0][1])
        print("%d polls saw a preview; the job %d" % (previews, res[0][0]))


main()

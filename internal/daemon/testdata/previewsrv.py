# A port previews' test server, run inside a sandbox: python3 previewsrv.py PORT LOG.
# Every request's path and headers are appended to LOG (one JSON line); GET/POST answer
# "sandbox-ok <path>" (setting two cookies, one named like moat's session); a WebSocket
# upgrade becomes an echo of every frame.
import base64, hashlib, http.server, json, socketserver, struct, sys, time

LOG = sys.argv[2]


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One write per answer, sent at once (no Nagle wait on the client's delayed ACK).
    wbufsize = -1
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def do_GET(self):
        with open(LOG, "a") as f:
            f.write(json.dumps({"path": self.path, "headers": [[k, v] for k, v in self.headers.items()]}) + "\n")
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.echo()
        if self.path == "/stream":  # one chunk, then the next after 3 s
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, part in enumerate([b"data: one\n\n", b"data: two\n\n"]):
                if i:
                    time.sleep(3)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        body = ("sandbox-ok " + self.path + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "app=1")
        self.send_header("Set-Cookie", "moat_session=evil; Path=/")
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def echo(self):
        key = self.headers["Sec-WebSocket-Key"]
        acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", acc)
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 15, h[1] & 127
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(b"\x88\x00")
                w.flush()
                return
            if op == 9:
                op = 10
            hdr = bytes([0x80 | op])
            if len(data) < 126:
                hdr += bytes([len(data)])
            elif len(data) < 65536:
                hdr += bytes([126]) + struct.pack(">H", len(data))
            else:
                hdr += bytes([127]) + struct.pack(">Q", len(data))
            w.write(hdr + data)
            w.flush()


class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


S(("0.0.0.0", int(sys.argv[1])), H).serve_forever()

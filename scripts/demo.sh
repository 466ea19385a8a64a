#!/usr/bin/env bash
# make demo: an agent-like task in a moat sandbox, with the embedded daemon of `moat run`
# (no `moat serve` needed until step 5, which starts one for the secret commands). It checks out a small Python project, runs its tests (one fails), lets the
# "agent" fix the bug inside the sandbox, shows the diff, and shows what the sandbox could
# not do, how a secret is brokered without entering the sandbox. Nothing here leaves this
# machine: the "registry" and the "API" are local stand-ins on 127.0.0.2 and 127.0.0.3.
set -euo pipefail
cd "$(dirname "$0")/.."
MOAT=${MOAT:-$PWD/bin/moat}
work=$(mktemp -d /tmp/moat-demo.XXXXXX)
serve=
stop_serve() { if [ -n "$serve" ]; then kill "$serve" 2>/dev/null || true; wait "$serve" 2>/dev/null || true; fi; }
trap 'stop_serve; rm -rf "$work"' EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "A small project with a bug: $work/wordcount"
repo=$work/wordcount
mkdir -p "$repo"
cat >"$repo/wordcount.py" <<'PY'
"""Count words in text."""


def count_words(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.split(" "):  # bug: tabs, newlines and case are not handled
        counts[word] = counts.get(word, 0) + 1
    return counts
PY
cat >"$repo/test_wordcount.py" <<'PY'
import unittest

from wordcount import count_words


class CountWords(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(count_words("a b a"), {"a": 2, "b": 1})

    def test_whitespace_and_case(self):
        self.assertEqual(count_words("The cat\n the\tdog"), {"the": 2, "cat": 1, "dog": 1})


if __name__ == "__main__":
    unittest.main()
PY
git -C "$repo" init -q -b main
git -C "$repo" -c user.email=dev@example.test -c user.name=dev add -A
git -C "$repo" -c user.email=dev@example.test -c user.name=dev commit -q -m "wordcount with a bug"

say "moat doctor: what this host can isolate with"
"$MOAT" doctor || true

say "1. The agent runs the tests in a fresh sandbox (expected: one failure)"
set +e
"$MOAT" run --repo "$repo" --memory 512M --disk 256M -- 'python3 -m unittest -v 2>&1 | tail -n 12'
set -e

say "2. The agent fixes the bug inside the sandbox, re-runs the tests and shows its diff"
"$MOAT" run --repo "$repo" --memory 512M --disk 256M -- '
set -e
python3 - <<PY
import re, pathlib
p = pathlib.Path("wordcount.py")
p.write_text(p.read_text().replace("text.split(\" \")", "text.lower().split()"))
PY
python3 -m unittest 2>&1 | tail -n 3
git -c color.ui=never diff --stat
git -c color.ui=never diff'
echo "(the host checkout is untouched:)"; git -C "$repo" status --short; git -C "$repo" log --oneline

say "3. What the sandbox could not do"
"$MOAT" run --memory 256M --disk 128M -- '
echo "who am I inside: $(id)"
echo "uid map (inside 0 is an unprivileged host uid):"; cat /proc/self/uid_map
grep -c . /etc/passwd | sed "s/^/users in \/etc\/passwd: /"
grep Seccomp: /proc/self/status
echo "routes (the only one leads to the moat gateway, which forwards nothing):"; ip route 2>&1
echo "processes visible:"; ps -e --no-headers | wc -l'

echo "even root inside sees none of the host's /root, /home or /var/lib/moat:"
"$MOAT" run --user root --memory 256M --disk 128M -- 'echo "  /root holds only skeleton files: $(ls -A /root | tr "\n" " ")"; echo "  /home: $(ls /home)"; ls -d /var/lib/moat 2>&1 | sed "s/^/  /"'

say "4. The network: nothing leaves unless the policy allows it"
# A stand-in package registry on this machine's loopback, named through --egress-hosts.
mkdir -p "$work/registry"
echo '{"name": "wordcount", "lockfileVersion": 3}' >"$work/registry/index.json"
python3 -m http.server --bind 127.0.0.2 18765 --directory "$work/registry" >/dev/null 2>&1 &
registry=$!
trap 'kill $registry 2>/dev/null; rm -rf "$work"' EXIT
echo "127.0.0.2 registry.demo.test" >"$work/hosts"
cat >"$work/policy.yaml" <<'YAML'
phases:
  setup: {allow: [registry.demo.test]}   # dependencies come in during setup...
  run: {net: deny-all}                   # ...and the task itself runs closed
YAML
sleep 0.3
"$MOAT" --egress-hosts "$work/hosts" run --policy "$work/policy.yaml" --memory 256M --disk 128M \
  --setup 'curl -sSf http://registry.demo.test:18765/index.json -o package-lock.json && echo "setup: fetched package-lock.json"' -- '
curl -sS --max-time 5 http://registry.demo.test:18765/index.json || echo "run phase: the registry is closed now"
curl -sS --max-time 5 https://example.com/ || echo "example.com: blocked (moat never resolved or contacted it)"
python3 -c "import socket; s = socket.create_connection((\"192.0.2.1\", 443), timeout=3); s.sendall(b\"x\"); s.recv(1)" 2>&1 | tail -n 1 | sed "s/^/direct IP 192.0.2.1: /"' || true

say "5. Credentials: the sandbox holds a placeholder, the API gets the real token"
# A stand-in API on 127.0.0.3 over HTTPS, with a certificate from a demo CA that the
# daemon trusts for upstreams (--egress-ca). It logs the Authorization header it receives.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=demo-ca \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=api.demo.test \
  -keyout "$work/api.key" -out "$work/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.demo.test\n' >"$work/ext"
openssl x509 -req -in "$work/api.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 1 -extfile "$work/ext" -out "$work/api.pem" 2>/dev/null
cat >"$work/api.py" <<'PY'
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def reply(self):
        with open(sys.argv[2], "a") as log:
            log.write(f"{self.command} {self.path} Authorization: {self.headers.get('Authorization')}\n")
        body = f"hello, {self.headers.get('Authorization')}\n".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = reply
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.3", 18766), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1] + "/api.pem", sys.argv[1] + "/api.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PY
python3 "$work/api.py" "$work" "$work/api.log" &
api=$!
trap 'kill $registry $api 2>/dev/null || true; "$MOAT" secret rm DEMO_API_TOKEN 2>/dev/null || true; stop_serve; rm -rf "$work"' EXIT
echo "127.0.0.3 api.demo.test" >>"$work/hosts"
# Secrets are kept by a daemon: only `moat run` starts one of its own, so start `moat serve`
# (with the demo's names and CA) for the rest of the demo.
"$MOAT" --egress-hosts "$work/hosts" --egress-ca "$work/ca.pem" serve --warm 0 >"$work/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do "$MOAT" ls >/dev/null 2>&1 && break; sleep 0.2; done
# The scope, set with the secret, says where its value may ever go: bindings outside it are refused.
printf 'sk-demo-REAL-%s' "$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')" |
  "$MOAT" secret set DEMO_API_TOKEN --hosts api.demo.test:18766 --path-prefix /v1/
"$MOAT" secret ls
echo "binding it to another host is refused: $("$MOAT" run --credential DEMO_API_TOKEN@elsewhere.demo.test -- true 2>&1 | tail -1)"
sleep 0.3
"$MOAT" run --memory 256M --disk 128M \
  --credential DEMO_API_TOKEN@api.demo.test:18766 --http 'api.demo.test GET /v1/' -- '
echo "inside, \$DEMO_API_TOKEN = $DEMO_API_TOKEN"
curl -sS --max-time 10 -H "Authorization: Bearer $DEMO_API_TOKEN" https://api.demo.test:18766/v1/whoami
echo "a POST the HTTP rule does not allow: $(curl -s --max-time 10 -o /dev/null -w "%{http_code}" -X POST https://api.demo.test:18766/v1/delete-everything)"' || true
echo "what the API server received (the real token, and no POST):"; sed 's/^/  /' "$work/api.log"
"$MOAT" secret rm DEMO_API_TOKEN

say "6. The same on gVisor: a separate user-space kernel"
"$MOAT" run --runtime runsc --memory 256M --disk 128M -- 'echo "kernel inside: $(uname -r) (host: '"$(uname -r)"')"; python3 -c "print(sum(range(10**6)))"'

say "Done: seven sandboxes ran, each deleted afterwards"
# The last one's delete may still be finishing: wait for it (at most 10 s).
for _ in $(seq 50); do [ -z "$("$MOAT" ls -q)" ] && break; sleep 0.2; done
"$MOAT" ls

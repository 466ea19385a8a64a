#!/usr/bin/env bash
# make demo: an agent-like task in a moat sandbox, with the embedded daemon (no `moat serve`
# needed). It checks out a small Python project, runs its tests (one fails), lets the
# "agent" fix the bug inside the sandbox, shows the diff, and shows what the sandbox could
# not do. Nothing here touches the network.
set -euo pipefail
cd "$(dirname "$0")/.."
MOAT=${MOAT:-$PWD/bin/moat}
work=$(mktemp -d /tmp/moat-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

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

say "5. The same on gVisor: a separate user-space kernel"
"$MOAT" run --runtime runsc --memory 256M --disk 128M -- 'echo "kernel inside: $(uname -r) (host: '"$(uname -r)"')"; python3 -c "print(sum(range(10**6)))"'

say "Done: six sandboxes ran, each deleted afterwards"
"$MOAT" ls

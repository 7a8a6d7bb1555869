# shellcheck shell=bash
# Sourced by hack/controlplane.sh (its ports are picked free on the host, where its loopback forward listens).
#
# free_ports COUNT ADDRESS: COUNT distinct free TCP ports on ADDRESS, picked below the kernel's ephemeral range, so
# no outgoing connection takes one between this check and the server's bind (or while a server restarts on its
# port in the outage tests); all bound at once so they are distinct.
free_ports() {
  python3 - "$1" "$2" <<'EOF'
import random, socket, sys
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
socks = []
while len(socks) < int(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind((sys.argv[2], random.randrange(10000, low) if low > 11000 else 0))
        socks.append(s)
    except OSError:
        s.close()
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Sourced by the bench and compliance scripts: a free loopback port, and a
# wait until a process they started answers over HTTP.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

wait_http() { # url
	for _ in $(seq 1 600); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
		sleep 0.1 # polling a process we started: no signal exists
	done
	echo "timed out waiting for $1" >&2
	return 1
}

#!/usr/bin/env python3
"""Readiness probe for scripts/kafka: send one Kafka Metadata request (v4) and check the answer.

usage: kafka-ready.py HOST:PORT MIN_BROKERS

Exits 0 when the broker answers with at least MIN_BROKERS brokers (0: any answer at all).
Hand-rolled on purpose: the Python standard library has no Kafka client, and the probe must run
before anything is built or installed. Metadata v4 is the oldest version Kafka 4.x still serves.
"""
import socket
import struct
import sys


def metadata_request(correlation_id: int) -> bytes:
    client_id = b"tidegate-probe"
    header = struct.pack(">hhih", 3, 4, correlation_id, len(client_id)) + client_id
    body = struct.pack(">i?", -1, False)  # topics = null (all), allow_auto_topic_creation = false
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def main() -> int:
    host, port = sys.argv[1].rsplit(":", 1)
    min_brokers = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with socket.create_connection((host, int(port)), timeout=3) as sock:
        sock.sendall(metadata_request(7))
        size = struct.unpack(">i", read_exact(sock, 4))[0]
        resp = read_exact(sock, size)
    correlation_id, _throttle, brokers = struct.unpack(">iii", resp[:12])
    if correlation_id != 7:
        print("unexpected correlation id", correlation_id, file=sys.stderr)
        return 1
    print(f"{brokers} broker(s)")
    return 0 if brokers >= min_brokers else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ConnectionError, struct.error) as e:
        print(f"not ready: {e}", file=sys.stderr)
        sys.exit(1)

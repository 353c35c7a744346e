"""A consumer-group member with Kafka's Python client (confluent-kafka,
librdkafka), driven by integration/clients_groups_test.go.

    python3 groups.py BOOTSTRAP GROUP TOPIC

subscribe()s to TOPIC in GROUP (offsets from the earliest, commits only
when told) and polls all the time, printing JSON lines on stdout as
groups_harness_test.go's memberLine has them:

    {"op": "assigned"|"revoked", "partitions": [...]}   rebalance callbacks
    {"op": "record", "partition", "offset", "value"}    each record read
    {"op": "committed", "offsets": {partition: offset}} after `commit`, what
                                                        committed() answers
    {"op": "error", "error"}                            an error the client reported
    {"op": "closed", "seconds"}                         close() returned, after so long

Commands on stdin, one a line: `commit` (a synchronous commit of what was
read, then committed() of the assignment); `close` (or SIGTERM, or the end
of stdin) closes the consumer, which leaves the group, and exits. Nothing
here decides whether the cluster behaved; the Go test checks what the
client reported.
"""

import json
import os
import select
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException


def say(**fields):
    print(json.dumps(fields), flush=True)


def partitions(tps):
    return sorted(tp.partition for tp in tps)


def main():
    bootstrap, group, topic = sys.argv[1:4]

    def on_error(err):
        say(op="error", error=str(err))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # A rebalance reaches this member within a heartbeat.
            "heartbeat.interval.ms": 500,
            "session.timeout.ms": 10000,
            "error_cb": on_error,
        }
    )
    consumer.subscribe(
        [topic],
        on_assign=lambda c, tps: say(op="assigned", partitions=partitions(tps)),
        on_revoke=lambda c, tps: say(op="revoked", partitions=partitions(tps)),
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    fd = sys.stdin.fileno()
    pending = b""
    while not stopping:
        msg = consumer.poll(0.05)
        if msg is not None:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    say(op="error", error=str(msg.error()))
            else:
                say(op="record", partition=msg.partition(), offset=msg.offset(), value=msg.value().decode())
        ready, _, _ = select.select([fd], [], [], 0)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            cmd = line.decode().strip()
            if cmd == "close":
                stopping.append(True)
            elif cmd == "commit":
                commit(consumer)
            elif cmd:
                say(op="error", error=f"unknown command {cmd!r}")
    start = time.monotonic()
    consumer.close()
    say(op="closed", seconds=time.monotonic() - start)


def commit(consumer):
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        # Nothing read since the last commit is no error.
        if e.args[0].code() != KafkaError._NO_OFFSET:
            say(op="error", error=f"commit: {e}")
            return
    try:
        tps = consumer.committed(consumer.assignment(), timeout=30)
    except KafkaException as e:
        say(op="error", error=f"committed: {e}")
        return
    say(op="committed", offsets={tp.partition: tp.offset for tp in tps})


if __name__ == "__main__":
    main()

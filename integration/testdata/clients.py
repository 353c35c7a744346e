"""Kafka's Python client (confluent-kafka, librdkafka) against Keel's Kafka
listeners, driven by integration/clients_test.go.

    python3 clients.py BOOTSTRAP

reads one command a line on stdin and answers JSON lines on stdout, so that
the Go test can kill a broker between two commands while one producer (and
its idempotent producer id) lives across the kill:

    create TOPIC PARTITIONS RF [KEY=VALUE...]  AdminClient.create_topics
    produce TOPIC PARTITION TAG FROM COUNT     queue values TAG<FROM>..TAG<FROM+COUNT-1>
    flush SECONDS                              wait for every delivery report
    consume TOPIC PARTITION                    read from the beginning to the high watermark
    quit

Every delivery report is printed as it comes (the loop polls the producer
while it waits for input): {"op": "delivered", "value", "partition",
"offset", "error"}. Nothing here decides whether the cluster behaved; the
Go test checks what the client reported.
"""

import json
import os
import select
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def say(**fields):
    print(json.dumps(fields), flush=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    bootstrap = sys.argv[1]
    common = {"bootstrap.servers": bootstrap}
    producer = Producer(
        dict(
            common,
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # Small requests, so that a kill lands mid-stream with
                # some in flight (librdkafka keeps 5 in flight at most).
                "batch.num.messages": 10,
                # A leader killed with kill -9 costs a session timeout and
                # a metadata refresh: retry well past that.
                "message.timeout.ms": 120000,
            },
        )
    )

    def delivered(err, msg):
        say(
            op="delivered",
            value=msg.value().decode(),
            partition=msg.partition(),
            offset=msg.offset(),
            error=None if err is None else str(err),
        )

    say(op="ready")
    for line in commands(producer):
        args = line.split()
        if not args:
            continue
        cmd = args[0]
        if cmd == "quit":
            break
        elif cmd == "create":
            topic, partitions, rf = args[1], int(args[2]), int(args[3])
            config = dict(kv.split("=", 1) for kv in args[4:])
            admin = AdminClient(common)
            futures = admin.create_topics(
                [NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=config)],
                operation_timeout=30,
                request_timeout=30,
            )
            try:
                futures[topic].result(timeout=60)
                say(op="created", topic=topic, error=None)
            except Exception as e:  # the test fails on any error
                say(op="created", topic=topic, error=str(e))
        elif cmd == "produce":
            topic, partition, tag, first, count = args[1], int(args[2]), args[3], int(args[4]), int(args[5])
            for i in range(first, first + count):
                while True:
                    try:
                        producer.produce(topic, value=f"{tag}{i}".encode(), partition=partition, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.1)  # the local queue is full
                producer.poll(0)
            say(op="queued", count=count)
        elif cmd == "flush":
            remaining = producer.flush(float(args[1]))
            say(op="flushed", remaining=remaining)
        elif cmd == "consume":
            consume(common, args[1], int(args[2]))
        else:
            say(op="error", error=f"unknown command {cmd!r}")
    producer.flush(10)


def commands(producer):
    """Yields stdin's lines, serving the producer's delivery reports while
    none is waiting. stdin is read unbuffered (os.read), so that no line
    waits in a buffer that select cannot see."""
    fd = sys.stdin.fileno()
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.05)
        producer.poll(0)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if pending:
                yield pending.decode()
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line.decode()


def consume(common, topic, partition):
    # No consumer group: Keel serves none (no FindCoordinator). group.id is
    # required by the constructor but unused with assign() and no commits.
    consumer = Consumer(
        dict(
            common,
            **{
                "group.id": "keel-clients-test-unused",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
            },
        )
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        next_offset = 0
        errors = []
        while next_offset < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(str(msg.error()))
                continue
            say(op="record", partition=msg.partition(), offset=msg.offset(), value=msg.value().decode())
            next_offset = msg.offset() + 1
        say(op="consumed", high_watermark=high, next_offset=next_offset, errors=errors)
    finally:
        consumer.close()


if __name__ == "__main__":
    main()

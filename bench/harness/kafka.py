"""The harness's own Kafka clients (confluent-kafka): topics created and deleted around each
measurement, delivery observed as the sum of a topic's high watermarks (or, for exactly-once,
its last stable offsets), topics read back after a measurement (untimed), and the warm-up of a
fresh Apache Kafka broker."""

import time

from .process import HarnessError, log


class Kafka:
    """An admin client and a watermark consumer on one broker."""

    def __init__(self, bootstrap):
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch",
                                  "enable.auto.commit": False})

    def create(self, topic, partitions):
        from confluent_kafka.admin import NewTopic
        for f in self.admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = self.consumer.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                return
            time.sleep(0.1)
        raise HarnessError(f"topic {topic} not ready")

    def delete(self, topic):
        try:
            for f in self.admin.delete_topics([topic]).values():
                f.result(30)
        except Exception as e:  # noqa: BLE001 - freeing the broker's disk is best effort
            log(f"delete topic {topic}: {e}")

    def high(self, topic, partitions, retry_s=60.0):
        """The sum of the topic's high watermarks (every record acknowledged so far). A
        broker error (a leader moving: Apache Kafka answers NOT_LEADER_FOR_PARTITION for a
        moment after the outage's SIGCONT) is retried for up to `retry_s` seconds."""
        from confluent_kafka import KafkaException, TopicPartition
        deadline = time.monotonic() + retry_s
        while True:
            try:
                return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5,
                                                               cached=False)[1]
                           for p in range(partitions))
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise HarnessError(f"watermarks of {topic}: {e}") from e
                time.sleep(0.1)

    def read_keys(self, topics, expected, idle=0.5, timeout=60.0):
        """[(records, distinct keys)] of partition 0 of each of `topics`, read from the start
        (one consumer for all) until each holds `expected` and then nothing came for `idle`
        seconds, or nothing came for 10 × `idle` (a topic short of records), or `timeout`."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-read",
                      "enable.auto.commit": False})
        index = {t: i for i, t in enumerate(topics)}
        records, keys = [0] * len(topics), [set() for _ in topics]
        try:
            c.assign([TopicPartition(t, 0, 0) for t in topics])
            last = start = time.monotonic()
            while time.monotonic() - start < timeout:
                full = all(r >= expected for r in records)
                if time.monotonic() - last > (idle if full else 10 * idle):
                    break
                for m in c.consume(10000, 0.1):
                    if m.error() or m.topic() not in index:
                        continue
                    records[index[m.topic()]] += 1
                    keys[index[m.topic()]].add(m.key())
                    last = time.monotonic()
            return [(r, len(k)) for r, k in zip(records, keys)]
        finally:
            c.close()

    def close(self):
        self.consumer.close()


class CommittedReader:
    """The read_committed view of `topic` (every partition): its last stable offsets, polled
    cheaply while a bridge drains the backlog, and a full read from offset 0 (records and
    distinct keys) once they stopped moving. For exactly-once the last stable offset counts
    one commit marker per transaction besides the records, and nothing of an open one.

    Why not a consumer reading all along: noida-db 0.2.3 ignores fetch.wait.max.ms (an idle
    consumer sends ~10 000 empty fetches a second, ~20 % of a broker core), so a consumer
    waiting behind an open transaction would take CPU from the bridge under test. noida-db also
    ignores fetch.max.bytes (a fetch answers everything from its offset to the end), so the full
    read raises receive.message.max.bytes to 1 GB (the largest backlog here, 20 KB × 20 000, is
    ~430 MB)."""

    def __init__(self, bootstrap, topic, partitions):
        from confluent_kafka import Consumer
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        # librdkafka's ListOffsets carries the consumer's isolation level: read_committed
        # answers the last stable offset.
        self.watch = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-eos-lso",
                               "isolation.level": "read_committed"})

    def stable(self):
        """The last stable offset of each partition."""
        from confluent_kafka import TopicPartition
        return tuple(self.watch.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5,
                                                      cached=False)[1]
                     for p in range(self.partitions))

    def read(self, expected, idle=1.0, timeout=120.0):
        """(records, distinct keys) a read_committed consumer reads from offset 0, until it
        read `expected` and then nothing for `idle` s, or nothing for 5 × `idle` s after its
        first record, or `timeout`."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-eos-read",
                      "enable.auto.commit": False, "isolation.level": "read_committed",
                      "fetch.max.bytes": 100_000_000, "receive.message.max.bytes": 1_000_000_000})
        records, keys = 0, set()
        try:
            c.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            last = start = time.monotonic()
            while time.monotonic() - start < timeout:
                wait = idle if records >= expected else 5 * idle if records else timeout
                if time.monotonic() - last > wait:
                    break
                for m in c.consume(10000, 0.1):
                    if m.error() is None:
                        records += 1
                        keys.add(m.key())
                        last = time.monotonic()
            return records, len(keys)
        finally:
            c.close()

    def close(self):
        self.watch.close()


def warm_up(bootstrap, records=50_000, size=1024):
    """Untimed: `records` records of `size` bytes produced (idempotent, acks=all) into a
    throwaway topic and read back, so that the JVM broker has compiled its produce and fetch
    paths before the first measurement (a fresh broker runs them interpreted for seconds)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = f"bench.warmup.{int(time.time())}"
    t0 = time.monotonic()
    k = Kafka(bootstrap)
    try:
        k.create(topic, 1)
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5})
        value = b"w" * size
        for i in range(records):
            while True:
                try:
                    p.produce(topic, value, str(i).encode())
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        if p.flush(60) != 0:
            raise HarnessError("the broker's warm-up: records not acknowledged within 60 s")
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-warmup",
                      "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            seen, deadline = 0, time.monotonic() + 60
            while seen < records and time.monotonic() < deadline:
                seen += sum(1 for m in c.consume(10000, 0.5) if m.error() is None)
        finally:
            c.close()
        k.delete(topic)
    finally:
        k.close()
    log(f"broker warmed up: {records} × {size} B produced and read back "
        f"({time.monotonic() - t0:.1f} s, untimed)")

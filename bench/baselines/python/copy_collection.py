"""Baseline: copy a MongoDB collection into Kafka as a competent user writes it in Python.

pymongo + confluent-kafka (librdkafka). Used by scripts/bench's copy block side by side with the
bridge's initial snapshot and `bench limit-copy`; it is deliberately small:

- one `find` over the whole collection with the bridge's snapshot query (`sort {_id: 1}`,
  `hint {_id: 1}`, `batch_size`, readConcern majority), iterated on one open cursor;
- each document produced with key = `{_id}` (canonical Extended JSON) and value = the document
  (relaxed Extended JSON, `bson.json_util`);
- idempotent producer, acks=all, `poll(0)` after each produce (delivery reports), `poll` while the
  local queue is full, one `flush()` at the end; exits non-zero if a delivery failed.

Prints one JSON object at the end (documents, its own rate, CPU seconds and peak RSS).
"""

import argparse
import json
import resource
import sys
import time

from bson import json_util
from pymongo import ASCENDING, MongoClient
from pymongo.read_concern import ReadConcern

from produce import Delivering

RELAXED = json_util.RELAXED_JSON_OPTIONS
CANONICAL = json_util.CANONICAL_JSON_OPTIONS


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--coll", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--compression", default="none")
    args = ap.parse_args()

    delivering = Delivering(args.bootstrap, args.compression)
    producer, errors, on_delivery = delivering.producer, delivering.errors, delivering.on_delivery

    started = time.monotonic()
    coll = MongoClient(args.uri)[args.db].get_collection(
        args.coll, read_concern=ReadConcern("majority")
    )
    cursor = coll.find(
        {}, sort=[("_id", ASCENDING)], hint=[("_id", ASCENDING)], batch_size=args.batch_size
    )
    count = 0
    for doc in cursor:
        key = json_util.dumps({"_id": doc["_id"]}, json_options=CANONICAL)
        value = json_util.dumps(doc, json_options=RELAXED)
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, retry
                producer.poll(0.01)
        producer.poll(0)
        count += 1
    left = producer.flush(120)
    if left or errors:
        sys.exit(f"delivery failed: {errors[0] if errors else f'{left} records not delivered'}")
    # The harness reads this process's own CPU and peak RSS from here: it has exited (and been
    # reaped) by the time the harness could look in /proc.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    secs = time.monotonic() - started
    print(
        json.dumps(
            {
                "documents": count,
                "secs": secs,
                "rate": count / max(secs, 1e-9),
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "peak_rss_kib": usage.ru_maxrss,
            }
        )
    )


if __name__ == "__main__":
    main()

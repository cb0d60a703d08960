"""Baseline: a MongoDB change stream -> Kafka bridge as a competent user writes it in Python.

pymongo + confluent-kafka (librdkafka). Used by scripts/bench side by side with the real bridge;
it is deliberately small and has none of the bridge's guarantees beyond the basics:

- one change stream on one collection, resumed (`start_after`) from a token saved in MongoDB;
- events collected in batches (up to --batch events, or --max-batch-ms, or until the stream has
  nothing more), each produced with key = documentKey (canonical Extended JSON) and
  value = the whole event (relaxed Extended JSON, `bson.json_util`);
- idempotent producer, acks=all; `flush()` after each batch, then the batch's resume token is
  saved, so the token never passes an undelivered event.

`--init` opens the stream, saves its initial token and exits (the harness calls it before writing
the backlog, like the bridge's first committed position). SIGTERM/SIGINT: finish the batch, exit 0.
"""

import argparse
import signal
import sys
import time

from bson import json_util
from pymongo import MongoClient

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
    ap.add_argument("--name", required=True, help="offsets document _id")
    ap.add_argument("--offsets-db", default="bench_baselines")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--max-batch-ms", type=float, default=20)
    ap.add_argument("--init", action="store_true")
    args = ap.parse_args()

    client = MongoClient(args.uri)
    offsets = client[args.offsets_db]["offsets"]
    coll = client[args.db][args.coll]

    if args.init:
        with coll.watch(max_await_time_ms=100) as stream:
            while stream.resume_token is None:
                if stream.try_next() is not None:
                    sys.exit("the collection is being written to; --init before the load")
            offsets.replace_one(
                {"_id": args.name}, {"_id": args.name, "token": stream.resume_token}, upsert=True
            )
        return

    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    delivering = Delivering(args.bootstrap, args.compression)
    producer, errors, on_delivery = delivering.producer, delivering.errors, delivering.on_delivery

    saved = offsets.find_one({"_id": args.name})
    start_after = saved["token"] if saved else None
    with coll.watch(start_after=start_after, max_await_time_ms=100) as stream:
        while not stop:
            n = 0
            started = time.monotonic()
            change = stream.try_next()
            while change is not None:
                key = json_util.dumps(change["documentKey"], json_options=CANONICAL)
                value = json_util.dumps(change, json_options=RELAXED)
                while True:
                    try:
                        producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery)
                        break
                    except BufferError:  # local queue full: serve delivery reports, retry
                        producer.poll(0.01)
                producer.poll(0)
                n += 1
                if n >= args.batch or (time.monotonic() - started) * 1000 >= args.max_batch_ms:
                    break
                change = stream.try_next()
            if n == 0:
                continue
            producer.flush()
            if errors:
                sys.exit(f"delivery failed: {errors[0]}")
            offsets.update_one(
                {"_id": args.name}, {"$set": {"token": stream.resume_token}}, upsert=True
            )


if __name__ == "__main__":
    main()

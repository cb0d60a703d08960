"""Python half of scripts/demo: topic setup, the order workload, the consumers, the offsets.

Subcommands (run with .cache/venv/bin/python; stdlib + pymongo + confluent-kafka only):
  create-topic  create the Kafka topic with N partitions (an existing one is kept)
  workload      write N orders to MongoDB and move them through their lifecycle; writes the
                plan (the expected changes of every order) to a JSON file for the consumers
  consume       read the topic in one consumer group until every planned change arrived (or a
                timeout) and check each order's changes arrive in order; one result line
  offsets       print (or, with --reset, delete) the bridge's offsets document of a pipeline
"""

import argparse
import json
import os
import random
import signal
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal

LIFECYCLE = ["pending", "paid", "accepted", "picked_up", "completed"]
STAMP_FIELD = {"paid": "paidAt", "accepted": "acceptedAt", "picked_up": "pickedUpAt",
               "completed": "completedAt", "cancelled": "cancelledAt"}
CATALOG = [("SKU-1001", "Margherita pizza", "9.50"), ("SKU-1002", "Pad thai", "11.90"),
           ("SKU-1003", "Caesar salad", "8.25"), ("SKU-1004", "Ramen", "12.40"),
           ("SKU-1005", "Falafel wrap", "7.80"), ("SKU-1006", "Sparkling water", "2.10"),
           ("SKU-1007", "Tiramisu", "5.60"), ("SKU-1008", "Burrito bowl", "10.75")]
CUSTOMERS = ["Ada", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Dennis", "Frances"]
CITIES = ["Berlin", "Lisbon", "Lyon", "Porto", "Turin", "Gdansk"]
CANCEL_RATIO = 0.10  # of all orders
DELETE_RATIO = 0.5  # of the cancelled ones


# ---------------------------------------------------------------- create-topic
def create_topic(args):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    fut = admin.create_topics([NewTopic(args.topic, num_partitions=args.partitions)])[args.topic]
    try:
        fut.result(timeout=15)
        print(f"topic {args.topic}: created with {args.partitions} partitions")
    except Exception as e:  # TOPIC_ALREADY_EXISTS when the servers are not the demo's own
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise
        parts = admin.list_topics(args.topic, timeout=10).topics[args.topic].partitions
        print(f"topic {args.topic}: exists already ({len(parts)} partitions)")


# ---------------------------------------------------------------- workload
def plan_order(rng):
    """The statuses one order goes through, and whether it is deleted at the end."""
    if rng.random() < CANCEL_RATIO:
        steps = rng.randint(1, len(LIFECYCLE) - 1)  # cancelled while pending … picked_up
        return LIFECYCLE[:steps] + ["cancelled"], rng.random() < DELETE_RATIO
    return list(LIFECYCLE), False


def new_order(rng, oid, number, now):
    from bson.decimal128 import Decimal128
    lines = [(sku, name, rng.randint(1, 3), Decimal(price))
             for sku, name, price in rng.sample(CATALOG, rng.randint(1, 4))]
    items = [{"sku": sku, "name": name, "qty": qty, "price": Decimal128(price)}
             for sku, name, qty, price in lines]
    total = Decimal128(sum(qty * price for _, _, qty, price in lines))
    customer = rng.choice(CUSTOMERS)
    return {
        "_id": oid, "orderNo": f"SO-{number:06d}", "status": "pending",
        "customer": {"id": f"C-{rng.randint(1, 999):04d}", "name": customer,
                     "email": f"{customer.lower()}@example.com", "city": rng.choice(CITIES)},
        "items": items, "total": total, "currency": "EUR", "createdAt": now, "updatedAt": now,
    }


def workload(args):
    from bson import ObjectId
    from pymongo import MongoClient

    rng = random.Random(args.seed)
    plans = {}  # oid -> (statuses, deleted)
    for _ in range(args.orders):
        plans[ObjectId()] = plan_order(rng)
    # One ticket per operation of an order; shuffling the tickets interleaves the orders while
    # the i-th ticket of an order is always its i-th operation.
    tickets = [oid for oid, (st, deleted) in plans.items() for _ in range(len(st) + deleted)]
    rng.shuffle(tickets)

    coll = MongoClient(args.mongo).shop.orders
    done = {oid: 0 for oid in plans}
    numbers = iter(range(1, args.orders + 1))
    t0 = time.monotonic()
    for oid in tickets:
        statuses, _ = plans[oid]
        step, now = done[oid], datetime.now(timezone.utc)
        done[oid] += 1
        if step == 0:
            coll.insert_one(new_order(rng, oid, next(numbers), now))
        elif step < len(statuses):
            status = statuses[step]
            coll.update_one({"_id": oid}, {"$set": {
                "status": status, STAMP_FIELD[status]: now, "updatedAt": now}})
        else:
            coll.delete_one({"_id": oid})
    took = time.monotonic() - t0

    expected = {}
    for oid, (statuses, deleted) in plans.items():
        steps = ["insert:pending"] + [f"update:{s}" for s in statuses[1:]]
        expected[str(oid)] = steps + (["delete", "tombstone"] if deleted else [])
    counts = {"orders": len(plans), "inserts": len(plans),
              "updates": sum(len(st) - 1 for st, _ in plans.values()),
              "deletes": sum(d for _, d in plans.values()),
              "cancelled": sum(st[-1] == "cancelled" for st, _ in plans.values())}
    counts["changes"] = counts["inserts"] + counts["updates"] + counts["deletes"]
    counts["records"] = counts["changes"] + counts["deletes"]  # + one tombstone per delete
    with open(args.plan, "w") as f:
        json.dump({"counts": counts, "orders": expected}, f)
    print(f"workload: {counts['orders']} orders ({counts['cancelled']} cancelled, "
          f"{counts['deletes']} of them deleted): {counts['changes']} changes = "
          f"{counts['inserts']} inserts + {counts['updates']} updates + {counts['deletes']} "
          f"deletes, {counts['records']} records expected with tombstones "
          f"({took:.1f} s, {counts['changes'] / took:.0f} writes/s, seed {args.seed})")


# ---------------------------------------------------------------- consume
def step_of(msg):
    """('insert:pending' | 'update:paid' | 'delete' | 'tombstone' | 'other:…', event id)."""
    headers = dict(msg.headers() or [])
    token = headers.get("mongo.resume_token", b"").decode()
    if msg.value() is None:
        return "tombstone", ("tombstone", token)
    event = json.loads(msg.value())
    op = event.get("operationType")
    if op == "insert":
        step = f"insert:{(event.get('fullDocument') or {}).get('status')}"
    elif op == "update":
        fields = (event.get("updateDescription") or {}).get("updatedFields") or {}
        step = f"update:{fields.get('status')}"
    else:
        step = op if op == "delete" else f"other:{op}"
    if headers.get("mongo.operation_type", b"").decode() != op:
        step = f"bad-header:{step}"
    return step, (op, token or json.dumps(event.get("_id"), sort_keys=True))


class OrderCheck:
    """Arrival bookkeeping of one order's expected steps."""

    def __init__(self, steps):
        self.index = {s: i for i, s in enumerate(steps)}
        self.arrived = [False] * len(steps)
        self.highest = -1
        self.partitions = set()
        self.seen = set()

    def add(self, step, event_id, partition, problems, key):
        """Returns the kind of the record: new, duplicate, out_of_order or unexpected."""
        self.partitions.add(partition)
        if event_id in self.seen:
            return "duplicate"
        self.seen.add(event_id)
        i = self.index.get(step)
        if i is None or self.arrived[i]:
            problems.append(f"{key}: unexpected {step}")
            return "unexpected"
        self.arrived[i] = True
        if i < self.highest:
            problems.append(f"{key}: {step} arrived after {self.order()[self.highest]}")
            return "out_of_order"
        self.highest = i
        return "new"

    def order(self):
        return sorted(self.index, key=self.index.get)

    def missing(self):
        return self.arrived.count(False)


def consume(args):
    from confluent_kafka import Consumer, KafkaError

    with open(args.plan) as f:
        plan = json.load(f)
    checks = {oid: OrderCheck(steps) for oid, steps in plan["orders"].items()}
    want = plan["counts"]["records"]
    stats = dict.fromkeys(["records", "new", "duplicate", "out_of_order", "unexpected",
                           "foreign", "bad_key"], 0)
    problems = []
    # read_committed (librdkafka's default, set explicitly): with delivery = "exactly_once"
    # it hides the records of aborted transactions; the Java client defaults otherwise.
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True,
                         "isolation.level": "read_committed"})
    consumer.subscribe([args.topic])
    stopped = []  # SIGTERM (scripts/demo gives up early): stop and report what arrived
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    try:
        while (stats["new"] + stats["out_of_order"] < want and time.monotonic() < deadline
               and not stopped):
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        problems.append(f"consumer error: {msg.error()}")
                    continue
                key = (msg.key() or b"").decode()
                try:
                    oid = json.loads(key)["_id"]["$oid"]
                except (ValueError, KeyError, TypeError):
                    stats["bad_key"] += 1
                    continue
                if oid not in checks:
                    stats["foreign"] += 1  # an earlier run's order (servers not the demo's own)
                    continue
                if key != json.dumps({"_id": {"$oid": oid}}, separators=(",", ":")):
                    stats["bad_key"] += 1
                stats["records"] += 1
                step, event_id = step_of(msg)
                stats[checks[oid].add(step, event_id, msg.partition(), problems, oid)] += 1
    finally:
        consumer.close()  # commits the group's offsets
    took = time.monotonic() - t0

    missing = sum(c.missing() for c in checks.values())
    seen_orders = sum(bool(c.seen) for c in checks.values())
    split = sum(len(c.partitions) > 1 for c in checks.values())
    ok = not (missing or stats["out_of_order"] or stats["unexpected"] or stats["bad_key"]
              or split)
    print(f"group {args.group:<6}: {stats['records']} records, {seen_orders}/{len(checks)} "
          f"orders, out-of-order {stats['out_of_order']}, missing {missing}, "
          f"unexpected {stats['unexpected']}, duplicates {stats['duplicate']}, "
          f"keys on >1 partition {split}, bad keys {stats['bad_key']}"
          f"{', other runs ' + str(stats['foreign']) if stats['foreign'] else ''} "
          f"({took:.1f} s{', stopped' if stopped else ''}) {'OK' if ok else 'FAILED'}")
    for line in problems[:10]:
        print(f"  {args.group}: {line}")
    if missing:
        late = [f"{oid}: {[s for s, i in c.index.items() if not c.arrived[i]]}"
                for oid, c in checks.items() if c.missing()]
        for line in late[:5]:
            print(f"  {args.group}: missing {line}")
    return 0 if ok else 1


# ---------------------------------------------------------------- offsets
def offsets(args):
    from pymongo import MongoClient
    coll = MongoClient(args.mongo).mongo_kafka_bridge.offsets
    if args.reset:
        n = coll.delete_one({"_id": args.pipeline}).deleted_count
        print(f"offsets: {'deleted' if n else 'no'} offsets document of pipeline {args.pipeline}")
        return 0
    doc = coll.find_one({"_id": args.pipeline})
    if doc is None:
        print(f"offsets: no offsets document for pipeline {args.pipeline}")
        return 1
    ts = doc.get("clusterTime")
    when = "none"
    if ts is not None:
        # The same form as `mongo-kafka-bridge offsets show`: <seconds>.<increment> and RFC 3339.
        at = datetime.fromtimestamp(ts.time, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        when = f"Timestamp({ts.time}.{ts.inc}) = {at}"
    print(f"offsets {args.pipeline}: clusterTime {when}, "
          f"eventsCommitted {doc.get('eventsCommitted')}, epoch {doc.get('epoch')}")
    if args.expect_events is not None and doc.get("eventsCommitted") != args.expect_events:
        print(f"offsets: WARNING eventsCommitted {doc.get('eventsCommitted')} != "
              f"{args.expect_events} changes written")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("create-topic")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--partitions", type=int, default=3)
    w = sub.add_parser("workload")
    w.add_argument("--mongo", required=True)
    w.add_argument("--orders", type=int, default=300)
    w.add_argument("--seed", type=int, default=random.randrange(1 << 31))
    w.add_argument("--plan", required=True)
    c = sub.add_parser("consume")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", required=True)
    c.add_argument("--plan", required=True)
    c.add_argument("--timeout", type=float, default=60)
    o = sub.add_parser("offsets")
    o.add_argument("--mongo", required=True)
    o.add_argument("--pipeline", required=True)
    o.add_argument("--reset", action="store_true")
    o.add_argument("--expect-events", type=int)
    args = p.parse_args()
    run = {"create-topic": create_topic, "workload": workload, "consume": consume,
           "offsets": offsets}[args.cmd]
    try:
        sys.exit(run(args) or 0)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

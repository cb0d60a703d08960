"""The baselines' Kafka producer: the bridge's producer guarantees (idempotent, acks=all,
linger 5 ms), and the delivery errors it reported. Shared by bridge.py and copy_collection.py."""

from confluent_kafka import Producer


class Delivering:
    """A confluent-kafka Producer with the bridge's guarantees; `errors` collects every failed
    delivery report, `on_delivery` is the callback to give `produce`."""

    def __init__(self, bootstrap, compression):
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": compression,
            }
        )
        self.errors = []

    def on_delivery(self, err, msg):
        if err is not None:
            self.errors.append(err)

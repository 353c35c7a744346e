"""confluent-kafka's AdminClient against Keel's brokers (TestPythonClient_Configs):
describe a topic's configs, alter them with AlterConfigs, describe again, and
have a bad value refused. Prints one line per step for the test to check."""

import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})


def describe(step, names):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res], request_timeout=30)[res].result(60)
    for name in names:
        entry = configs[name]
        # confluent-kafka 1.x gives the source as librdkafka's number.
        source = ConfigSource(entry.source).name
        print(f"{step} {name}={entry.value} source={source}")


def alter(configs):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=configs)
    admin.alter_configs([res], request_timeout=30)[res].result(60)


describe("before", ["retention.ms"])
alter({"retention.ms": "3600000", "min.insync.replicas": "2"})
print("altered")
describe("after", ["retention.ms", "min.insync.replicas"])
try:
    alter({"min.insync.replicas": "0"})
    print("accepted min.insync.replicas=0")
except KafkaException as e:
    print(f"refused min.insync.replicas=0: {e.args[0].name()}")

// Package kafka serves the Kafka protocol on a broker, so that Kafka's own
// clients (franz-go, librdkafka and kcat, the Java client) produce to and
// consume from Keel's partitions.
//
// It is the protocol front of a broker, nothing more: metadata answers come
// from the broker's replayed image (ImageSource), so a client follows Keel's
// elections as they are applied; records go to and come from the data plane
// (broker.Backend); topic creation, deletion and new partitions are forwarded to the
// active controller, and producer ids come from it in blocks (Controller), as
// a KRaft broker forwards them. It imports neither raft nor the controller.
//
// Served: ApiVersions, Metadata, Produce, Fetch (sessionless), ListOffsets,
// OffsetForLeaderEpoch, InitProducerId (idempotent producers, no transactions), DescribeCluster,
// CreateTopics, DeleteTopics and CreatePartitions, DescribeLogDirs,
// DeleteRecords and DescribeProducers (from the broker's own logs), at the versions of
// docs/kafka.md. Transactions, consumer groups and SASL are not served, and
// ApiVersions does not list them. Requests on one connection are answered
// in order, as Kafka's broker answers them; an acks=all produce and a fetch
// waiting for records wait off the connection's reader (a fetch's wait ends
// with its connection, and by Config.FetchMaxWait); a request larger than
// Config.MaxRequestSize, or one that does not parse, closes its connection
// (Kafka's answer too), and nothing a client sends can stop the listener.
package kafka

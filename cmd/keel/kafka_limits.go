package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/broker/kafka"
)

// kafkaLimits are the Kafka listener's bounds on request bytes: what a
// client can make a broker hold in memory.
type kafkaLimits struct {
	maxRequestSize            int32
	maxOtherRequestSize       int32
	queuedMaxRequestBytes     int64
	connectionMaxRequestBytes int64
}

func (l *kafkaLimits) addFlags(f *pflag.FlagSet) {
	f.Int32Var(&l.maxRequestSize, "kafka-max-request-size", kafka.DefaultMaxRequestSize,
		"the largest Kafka request, in bytes (Kafka's socket.request.max.bytes); larger closes the connection. Also the largest batch a topic's max.message.bytes can allow")
	f.Int32Var(&l.maxOtherRequestSize, "kafka-max-other-request-size", kafka.DefaultMaxOtherRequestSize,
		"the largest Kafka request other than a produce, in bytes; larger closes the connection")
	f.Int64Var(&l.queuedMaxRequestBytes, "kafka-queued-max-request-bytes", kafka.DefaultQueuedMaxRequestBytes,
		"the bytes of unanswered Kafka produces a broker holds, and of other requests at 32 times their size")
	f.Int64Var(&l.connectionMaxRequestBytes, "kafka-connection-max-request-bytes", kafka.DefaultConnectionMaxRequestBytes,
		"the bytes of unanswered Kafka requests one connection holds, counted as --kafka-queued-max-request-bytes does")
}

// check refuses a bound that is not positive, naming its flag.
func (l *kafkaLimits) check() error {
	switch {
	case l.maxRequestSize <= 0:
		return fmt.Errorf("--kafka-max-request-size %d: want a positive number of bytes", l.maxRequestSize)
	case l.maxOtherRequestSize <= 0:
		return fmt.Errorf("--kafka-max-other-request-size %d: want a positive number of bytes", l.maxOtherRequestSize)
	case l.queuedMaxRequestBytes <= 0:
		return fmt.Errorf("--kafka-queued-max-request-bytes %d: want a positive number of bytes", l.queuedMaxRequestBytes)
	case l.connectionMaxRequestBytes <= 0:
		return fmt.Errorf("--kafka-connection-max-request-bytes %d: want a positive number of bytes", l.connectionMaxRequestBytes)
	}
	return nil
}

// apply sets cfg's bounds; a zero bound keeps the listener's default.
func (l kafkaLimits) apply(cfg *kafka.Config) {
	cfg.MaxRequestSize = l.maxRequestSize
	cfg.MaxOtherRequestSize = l.maxOtherRequestSize
	cfg.QueuedMaxRequestBytes = l.queuedMaxRequestBytes
	cfg.ConnectionMaxRequestBytes = l.connectionMaxRequestBytes
}

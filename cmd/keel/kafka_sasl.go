package main

import (
	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/broker/kafka"
)

// defaultKafkaSASL is --kafka-sasl's default: SASL/SCRAM offered. It lets
// no one in who could not connect before, but a client without a
// certificate on a TLS listener that logs in with credentials an operator
// made (keel user add): anonymous plaintext clients keep their rights,
// and with no credentials in the log no login succeeds.
const defaultKafkaSASL = kafka.SASLOptional

// kafkaSASL is the --kafka-sasl flag.
type kafkaSASL struct{ mode string }

func (k *kafkaSASL) addFlags(f *pflag.FlagSet) {
	f.StringVar(&k.mode, "kafka-sasl", string(defaultKafkaSASL),
		"SASL/SCRAM logins on the Kafka listener: off, optional or required (docs/kafka.md#sasl)")
}

// check refuses a mode Keel does not know, naming the flag.
func (k kafkaSASL) check() error {
	_, err := kafka.ParseSASLMode(k.mode)
	return err
}

// apply sets cfg's mode (checked).
func (k kafkaSASL) apply(cfg *kafka.Config) { cfg.SASL = kafka.SASLMode(k.mode) }

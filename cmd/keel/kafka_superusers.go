package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/acl"
	"github.com/keel-dev/keel/broker/kafka"
)

// kafkaSuperUsers is --kafka-super-users: Kafka's super.users, principals
// the Kafka listener allows everything without ACLs, beside the keel
// roles' certificates.
type kafkaSuperUsers []string

func (k *kafkaSuperUsers) addFlags(f *pflag.FlagSet) {
	f.StringSliceVar((*[]string)(k), "kafka-super-users", nil,
		"principals (User:NAME, comma-separated) the Kafka listener allows everything without ACLs, beside keel roles' certificates (Kafka's super.users)")
}

func (k kafkaSuperUsers) check() error {
	for _, p := range k {
		if err := acl.ValidPrincipal(p); err != nil {
			return fmt.Errorf("--kafka-super-users: %v", err)
		}
	}
	return nil
}

func (k kafkaSuperUsers) apply(c *kafka.Config) { c.SuperUsers = append([]string(nil), k...) }

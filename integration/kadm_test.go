package integration

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaAdmin is franz-go's admin client (kadm) over kafkaClient: the Kafka
// admin API as operators' Go tooling calls it. Closed with its client at
// the end of the test.
func kafkaAdmin(t *testing.T, kafka map[int32]string, opts ...kgo.Opt) *kadm.Client {
	t.Helper()
	return kadm.NewClient(kafkaClient(t, kafka, opts...))
}

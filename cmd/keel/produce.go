package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keel-dev/keel/tlsauth"
)

// defaultBootstrap is keel broker's Kafka listener as the docs' examples
// run it on one machine.
const defaultBootstrap = "127.0.0.1:9092"

// kafkaFlags are what produce and consume share: the brokers' Kafka
// listeners, and how long to wait.
type kafkaFlags struct {
	bootstrap string
	topic     string
	timeout   time.Duration
}

func (k *kafkaFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&k.bootstrap, "bootstrap", defaultBootstrap, "Kafka listeners of the brokers (keel broker --kafka-advertise), host:port,... (any one will do)")
	f.StringVar(&k.topic, "topic", "", "the topic (required)")
	f.DurationVar(&k.timeout, "timeout", 30*time.Second, "how long to keep retrying a record, or to wait for one (consume)")
}

// client is a franz-go client of the brokers' Kafka listeners, over mutual
// TLS with the --tls-* certificate when given.
func (k *kafkaFlags) client(cmd *cobra.Command, opts ...kgo.Opt) (*kgo.Client, error) {
	if k.topic == "" {
		return nil, errors.New("--topic is required")
	}
	return kafkaClient(cmd, k.bootstrap, k.timeout, opts...)
}

// kafkaClient is a franz-go client of the Kafka listeners in bootstrap,
// retrying a request for up to timeout, over mutual TLS with the --tls-*
// certificate when given.
func kafkaClient(cmd *cobra.Command, bootstrap string, timeout time.Duration, opts ...kgo.Opt) (*kgo.Client, error) {
	seeds := splitAddrs(bootstrap)
	if len(seeds) == 0 {
		return nil, errors.New("--bootstrap: no address given")
	}
	tlsCfg, err := tlsFlags(cmd)
	if err != nil {
		return nil, err
	}
	opts = append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(timeout)}, opts...)
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg.Client(tlsauth.RoleBroker)))
	}
	return kgo.NewClient(opts...)
}

// interrupted is a context that ends on SIGINT or SIGTERM.
func interrupted(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func newProduceCmd() *cobra.Command {
	var k kafkaFlags
	var acks, keySep string
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Produce the lines of stdin to a topic through the brokers' Kafka listeners",
		Long: `Read lines from stdin and produce each as one record to --topic, with an
idempotent franz-go producer through the brokers' Kafka listeners
(keel broker --kafka-listen). With --key-sep, the text before the first
separator is the record's key and the rest its value; lines without it have
no key. Records with a key go to the partition of its hash, others spread.

A topic that does not exist is created on first use if the cluster's
auto.create.topics.enable allows it (and says so). It prints how many records
were acknowledged, and fails naming the first record that was not and why.`,
		Example: `  echo 'user-1:signed up' | keel produce --topic events --key-sep : --bootstrap 127.0.0.1:9092
  keel produce --topic events --acks 1 < lines.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := []kgo.Opt{kgo.DefaultProduceTopic(k.topic), kgo.RecordDeliveryTimeout(k.timeout)}
			switch acks {
			case "all", "-1":
				opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
			case "1":
				opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
			case "0":
				opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
			default:
				return fmt.Errorf("--acks %q: want all, 1 or 0", acks)
			}
			// As Kafka's producers do, it lets the brokers create a topic
			// that does not exist (auto.create.topics.enable).
			cl, err := k.client(cmd, append(opts, kgo.AllowAutoTopicCreation())...)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := interrupted(cmd.Context())
			defer cancel()
			seeds := splitAddrs(k.bootstrap)
			existed, err := k.writable(ctx, cl, seeds)
			if err != nil {
				return err
			}
			n, err := produceLines(ctx, cl, cmd.InOrStdin(), keySep, func(err error) error {
				return kafkaCause(ctx, cl, seeds, k.topic, -1, opWrite, err)
			})
			fmt.Fprintf(cmd.OutOrStdout(), "produced %s to %s\n", count(n, "record"), k.topic)
			if !existed && n > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "topic %s did not exist: the cluster created it on first use "+
					"(auto.create.topics.enable, with num.partitions and default.replication.factor)\n", k.topic)
			}
			return err
		},
	}
	k.add(cmd)
	f := cmd.Flags()
	f.StringVar(&acks, "acks", "all", "acknowledgements to wait for: all (every ISR member), 1 (the leader), 0 (none)")
	f.StringVar(&keySep, "key-sep", "", "separator between a line's key and value; empty: lines are values only")
	return cmd
}

// maxLine bounds one line of stdin (one record).
const maxLine = 1 << 20

// produceLines produces each line of in, waiting for each to be
// acknowledged so that a failure names its line, and why (explain), and
// returns how many were.
func produceLines(ctx context.Context, cl *kgo.Client, in io.Reader, keySep string, explain func(error) error) (int, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	for line := 1; sc.Scan(); line++ {
		r := &kgo.Record{Value: append([]byte(nil), sc.Bytes()...)}
		if keySep != "" {
			if key, value, ok := strings.Cut(string(r.Value), keySep); ok {
				r.Key, r.Value = []byte(key), []byte(value)
			}
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return n, fmt.Errorf("line %d not acknowledged: %w", line, explain(err))
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("read stdin: %w", err)
	}
	return n, nil
}

// consumedRecord is the JSON contract of `keel consume -o json`, one object
// a line.
type consumedRecord struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Timestamp string `json:"timestamp"`
	Key       string `json:"key,omitempty"`
	Value     string `json:"value"`
}

func newConsumeCmd() *cobra.Command {
	var k kafkaFlags
	var partition int32
	var fromBeginning bool
	var limit int
	var output string
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Print a topic's records with their partition and offset",
		Long: `Read --topic's records through the brokers' Kafka listeners with a franz-go
consumer (no consumer group: nothing is committed) and print each with its
partition and offset. Without --from-beginning it starts at the end and
prints what is produced from then on. It stops after --max records, or on
Ctrl-C, or (with --max) when --timeout passes without the records: then it
fails saying what the topic holds. It fails at once, naming the cause, when
nothing listens at --bootstrap, the topic or partition does not exist, or
the client may not read it.`,
		Example: `  keel consume --topic events --from-beginning --max 10 --bootstrap 127.0.0.1:9092
  keel consume --topic events --partition 2 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			start := kgo.NewOffset().AtEnd()
			if fromBeginning {
				start = kgo.NewOffset().AtStart()
			}
			var opt kgo.Opt
			if partition >= 0 {
				opt = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{k.topic: {partition: start}})
			} else {
				opt = kgo.ConsumeTopics(k.topic)
			}
			cl, err := k.client(cmd, opt, kgo.ConsumeResetOffset(start))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := interrupted(cmd.Context())
			defer cancel()
			seeds := splitAddrs(k.bootstrap)
			if err := k.readable(ctx, cl, seeds, partition); err != nil {
				return err
			}
			wait := ctx
			if limit > 0 {
				var stop context.CancelFunc
				wait, stop = context.WithTimeout(ctx, k.timeout)
				defer stop()
			}
			n, err := consume(wait, cl, cmd.OutOrStdout(), limit, output == "json")
			switch {
			case err != nil:
				return kafkaCause(ctx, cl, seeds, k.topic, partition, opRead, err)
			case limit > 0 && n < limit && ctx.Err() == nil:
				return k.shortfall(ctx, cl, seeds, partition, fromBeginning, n, limit)
			}
			return nil
		},
	}
	k.add(cmd)
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", -1, "read only this partition (default: every partition)")
	f.BoolVar(&fromBeginning, "from-beginning", false, "start at each partition's first record instead of its end")
	f.IntVar(&limit, "max", 0, "stop after this many records (0: never)")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json (one object a line)")
	return cmd
}

// consume prints records as they come until limit (0: none) or ctx ends,
// and returns how many it printed; an error is the brokers' refusal.
func consume(ctx context.Context, cl *kgo.Client, w io.Writer, limit int, asJSON bool) (int, error) {
	enc := json.NewEncoder(w)
	n := 0
	for limit == 0 || n < limit {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		var fatal error
		fs.EachError(func(topic string, p int32, err error) {
			if fatal == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				fatal = fmt.Errorf("%s/%d: %w", topic, p, err)
			}
		})
		if fatal != nil && fs.NumRecords() == 0 {
			return n, fatal
		}
		for _, r := range fs.Records() {
			if limit > 0 && n == limit {
				break
			}
			n++
			if asJSON {
				if err := enc.Encode(consumedRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
					Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano), Key: string(r.Key), Value: string(r.Value)}); err != nil {
					return n, err
				}
				continue
			}
			if r.Key != nil {
				fmt.Fprintf(w, "partition %d offset %d key %s: %s\n", r.Partition, r.Offset, r.Key, r.Value)
			} else {
				fmt.Fprintf(w, "partition %d offset %d: %s\n", r.Partition, r.Offset, r.Value)
			}
		}
	}
	return n, nil
}

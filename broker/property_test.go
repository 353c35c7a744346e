package broker

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// randomLog commits n random valid batches: brokers registering, bouncing,
// fenced, unfenced and leaving, controller epochs, no-ops. Each record is
// checked against the image as the batch so far has left it, so every batch
// is valid; raft indexes skip now and then, as non-batch entries make them.
func randomLog(t *testing.T, rng *rand.Rand, n int) *testLog {
	t.Helper()
	l := &testLog{images: []*fsm.Image{fsm.Empty()}}
	l.commit(t, 1, 1, clusterIDRec("c"), featureLevelRec(1), epochRec(1, 1))
	term, incarnations := uint64(1), 0
	for len(l.entries) < n {
		last := l.images[len(l.images)-1]
		offset := last.Offset + 1 + uint64(rng.IntN(3))
		if rng.IntN(8) == 0 {
			term++
		}
		var records []*keelpb.Record
		img := last
		for want := 1 + rng.IntN(3); len(records) < want; {
			rec := randomRecord(rng, img, &incarnations)
			data, _ := fsm.EncodeBatch(rec)
			batch, _ := fsm.DecodeBatch(data)
			if next, err := fsm.Apply(img, offset, term, batch); err == nil {
				records, img = append(records, rec), next
			}
		}
		l.commit(t, offset, term, records...)
	}
	return l
}

func randomRecord(rng *rand.Rand, img *fsm.Image, incarnations *int) *keelpb.Record {
	brokers := img.Brokers()
	some := func() *fsm.Broker {
		if len(brokers) == 0 {
			return &fsm.Broker{ID: 99, Epoch: 1}
		}
		return brokers[rng.IntN(len(brokers))]
	}
	switch rng.IntN(12) {
	case 0, 1, 2:
		*incarnations++
		return registerRec(int32(rng.IntN(6)), fmt.Sprintf("incarnation-%d", *incarnations))
	case 3, 4:
		b := some()
		return fenceRec(b.ID, b.Epoch)
	case 5, 6, 7:
		b := some()
		return unfenceRec(b.ID, b.Epoch)
	case 8:
		b := some()
		return unregisterRec(b.ID, b.Epoch)
	case 9:
		return epochRec(img.ControllerEpoch+1, int32(1+rng.IntN(3)))
	}
	return noOpRec()
}

// TestReplayer_MatchesTheControllerByteForByte is the push channel's
// property: whatever snapshot a broker starts from, however the stream is cut
// into pushes, resent after reconnects, interrupted by a deposed controller
// or a lost push, the broker ends with the controller's image, byte for byte.
func TestReplayer_MatchesTheControllerByteForByte(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x6b65656c))
			l := randomLog(t, rng, 20+rng.IntN(60))
			final := l.images[len(l.images)-1]
			byOffset := map[uint64]int{} // offset -> how many batches make it
			for i, img := range l.images {
				byOffset[img.Offset] = i
			}
			epoch := final.ControllerEpoch

			var published []uint64
			r := newReplayer(discardLogger(), func(before, after *fsm.Image) error {
				published = append(published, after.Offset)
				return nil
			})
			t.Cleanup(r.reset)
			send := func(p *keelpb.MetadataPush) error { return r.handle(p) }

			for streams := 0; r.img.Offset != final.Offset; streams++ {
				if streams > 1000 {
					t.Fatalf("not caught up after %d streams: at %d, controller at %d", streams, r.img.Offset, final.Offset)
				}
				// A new stream: a snapshot first when the broker is new, or
				// when the controller no longer has the broker's offset.
				pos := byOffset[r.fromOffset()]
				if r.fromOffset() == 0 || rng.IntN(5) == 0 {
					pos += rng.IntN(len(l.images) - pos)
					snap := snapshotBytes(t, l.images[pos])
					for _, p := range chunkPushes(epoch, cut(snap, 1+rng.IntN(64))) {
						if err := send(p); err != nil {
							t.Fatalf("snapshot at %d: %v", l.images[pos].Offset, err)
						}
					}
				}
				// Then the tail, cut into pushes at random, each starting a
				// little before the last one ended (resends are skipped).
				next := pos
				for next < len(l.entries) {
					from := max(0, next-rng.IntN(3))
					to := min(len(l.entries), next+1+rng.IntN(5))
					var err error
					switch rng.IntN(15) {
					case 0: // a deposed controller
						if epoch > 1 {
							err = send(entriesPush(epoch-1, l.entries[from:to]...))
							if !errors.Is(err, errStaleControllerEpoch) {
								t.Fatalf("stale push: err = %v", err)
							}
						}
					case 1: // a lost push
						if to < len(l.entries) && l.entries[to].PrevOffset > r.img.Offset {
							err = send(entriesPush(epoch, l.entries[to]))
							if !errors.Is(err, errOffsetGap) {
								t.Fatalf("gap: err = %v", err)
							}
						}
					default:
						if err = send(entriesPush(epoch, l.entries[from:to]...)); err != nil {
							t.Fatalf("entries %d..%d: %v", from, to, err)
						}
						next = to
					}
					if err != nil || rng.IntN(6) == 0 {
						break // reconnect
					}
				}
			}

			if got, want := snapshotBytes(t, r.img), snapshotBytes(t, final); !bytes.Equal(got, want) {
				t.Fatalf("broker image differs from the controller's at offset %d", final.Offset)
			}
			// The stream never takes the broker back: a snapshot is at least
			// where the broker was.
			for i := 1; i < len(published); i++ {
				if published[i] < published[i-1] {
					t.Fatalf("published offsets go back: %v", published)
				}
			}
		})
	}
}

package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws progress bars on w (a terminal), or nothing when w is nil.
type progress struct{ w io.Writer }

// bar is one progress bar; a nil bar does nothing.
type bar struct{ pb *progressbar.ProgressBar }

// start opens a bar of total steps (-1: unknown, a spinner); none for an
// empty desc (a phase too short to show).
func (p progress) start(total int64, desc string) *bar {
	if p.w == nil || desc == "" {
		return nil
	}
	return &bar{pb: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(total > 0),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
	)}
}

func (b *bar) add(n int) {
	if b != nil {
		_ = b.pb.Add(n)
	}
}

func (b *bar) set(n int) {
	if b != nil {
		_ = b.pb.Set(n)
	}
}

// done removes the bar.
func (b *bar) done() {
	if b != nil {
		_ = b.pb.Finish()
		_ = b.pb.Exit()
	}
}

// statusf writes one status line to w, if any.
func statusf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "bench: "+format+"\n", args...)
	}
}

// Command benchtable turns the output of `keel bench -o json` into the rows
// of docs/benchmarks.md's table of current figures, so the table is
// regenerated from a run, never typed in:
//
//	./bin/keel bench -o json > run.json
//	go run ./internal/bench/cmd/benchtable -command 'keel bench' < run.json
//
// Several reports concatenated on stdin give one table; -header=false
// prints only the rows, to append a run measured with another command.
// The targets checked in the run follow, with the machine's idle
// baseline (-targets=false leaves them out).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/keel-dev/keel/cmd/keel/internal/bench"
)

func main() {
	command := flag.String("command", "keel bench", "the command that produced the report, printed in each row")
	date := flag.String("date", time.Now().UTC().Format(time.DateOnly), "the date of the run (YYYY-MM-DD, UTC)")
	header := flag.Bool("header", true, "print the table's header")
	targets := flag.Bool("targets", true, "print the targets checked, and the machine's idle baseline, after the rows")
	flag.Parse()
	if err := run(*command, *date, *header, *targets); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(command, date string, header, targets bool) error {
	day, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return fmt.Errorf("-date %q: want YYYY-MM-DD", date)
	}
	reports, err := bench.ReadReports(os.Stdin)
	if err != nil {
		return err
	}
	if header {
		fmt.Print(bench.MarkdownHeader)
	}
	if err := bench.WriteMarkdownRows(os.Stdout, reports, day, command); err != nil || !targets {
		return err
	}
	fmt.Print("\n" + bench.MarkdownTargetsHeader)
	return bench.WriteMarkdownTargets(os.Stdout, reports)
}

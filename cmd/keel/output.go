package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// checkOutput checks an -o value: table or json.
func checkOutput(output string) error {
	if output != "table" && output != "json" {
		return fmt.Errorf("-o %q: want table or json", output)
	}
	return nil
}

// printAs prints v as -o asks: JSON, the contract scripts read, or table's
// rendering for people.
func printAs[V any](w io.Writer, output string, v V, table func(w io.Writer, v V) error) error {
	if output == "json" {
		return printJSON(w, v)
	}
	return table(w, v)
}

// tableOf prints rows as a table under header, each row's cells as cells
// renders them. No rows print none instead, or the header alone if none is
// empty.
func tableOf[R any](header []string, none string, cells func(r R) []string) func(w io.Writer, rows []R) error {
	return func(w io.Writer, rows []R) error {
		if len(rows) == 0 && none != "" {
			fmt.Fprintln(w, none)
			return nil
		}
		table := [][]string{header}
		for _, r := range rows {
			table = append(table, cells(r))
		}
		return printTable(w, table)
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printTable(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

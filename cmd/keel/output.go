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

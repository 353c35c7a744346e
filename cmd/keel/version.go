package main

import (
	"io"
	"runtime"

	"github.com/spf13/cobra"
)

// versionInfo is what `keel version -o json` prints.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print keel's version, the commit it was built from and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			v := versionInfo{Version: buildVersion(), Commit: buildCommit(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			return printAs(cmd.OutOrStdout(), output, v, func(w io.Writer, v versionInfo) error {
				return printTable(w, [][]string{
					{"Version:", v.Version},
					{"Commit:", v.Commit},
					{"Go version:", v.GoVersion},
					{"Platform:", v.Platform},
				})
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

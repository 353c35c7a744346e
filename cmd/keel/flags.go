package main

import "github.com/spf13/pflag"

// hidePlaceholder keeps --help from showing the default of fs's flag name:
// the default of a required flag is a placeholder the command refuses (a
// broker id of -1), so "(required) (default -1)" reads as a contradiction.
// Parsing, and --print-config, still see the flag's value as before.
func hidePlaceholder(fs *pflag.FlagSet, name string) {
	f := fs.Lookup(name)
	f.Value = placeholder{f.Value}
	f.DefValue = ""
}

// placeholder wraps a scalar flag value in a type pflag does not know:
// pflag shows a known type's default unless it is that type's zero ("0"
// for an int), but an unknown type's none when DefValue is empty.
type placeholder struct{ pflag.Value }

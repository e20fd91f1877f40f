package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves a subcommand's flags before its positional arguments. urfave/cli v2 stops
// reading flags at the first argument, so `start hello --wait` would otherwise take --wait as
// a second argument; people write flags after the argument all the time.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	cmds, i := app.Commands, 1
	var cmd *cli.Command
	for i < len(args) {
		next := findCommand(cmds, args[i])
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
		i++
	}
	if cmd == nil || len(cmd.Subcommands) > 0 {
		return args
	}
	out := append([]string{}, args[:i]...)
	var positional []string
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			positional = append(positional, args[j:]...)
			j = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			out = append(out, a)
			if !strings.Contains(a, "=") && takesValue(cmd, strings.TrimLeft(a, "-")) && j+1 < len(args) {
				j++
				out = append(out, args[j])
			}
		default:
			positional = append(positional, a)
		}
	}
	return append(out, positional...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the named flag of cmd reads the next argument as its value.
func takesValue(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				if tf, ok := f.(interface{ TakesValue() bool }); ok {
					return tf.TakesValue()
				}
				return true
			}
		}
	}
	return false
}

package main

import "github.com/urfave/cli/v2"

// databaseURLFlag is shared by every command that talks to PostgreSQL.
func databaseURLFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "database-url",
		Usage:   "PostgreSQL connection string, e.g. postgres://user:pass@host:5432/db",
		EnvVars: []string{"DATABASE_URL", "PGFLOW_WASM_DATABASE_URL"},
	}
}

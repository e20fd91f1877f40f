package flowfile

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pgflow-wasm/pgflow-wasm/sandbox/bytesize"
	"github.com/pgflow-wasm/pgflow-wasm/sandbox/sqlcap"
)

// SQL is a step's `sql` section: the SQL its handler may run, as which role, where.
type SQL struct {
	// Role is the PostgreSQL role the statements run as: the worker logs in as it for
	// them, never as its own login; its grants and row-level security are the wall.
	Role string
	// PasswordEnv names the worker environment variable holding Role's password; "" logs
	// in without one (the password file's entry, trust or certificate authentication).
	PasswordEnv string
	// DatabaseEnv names the worker environment variable holding the URL of another
	// database; "" is the pgflow database.
	DatabaseEnv string
	// Transactional: the task's statements and its completion commit in one transaction
	// (the pgflow database only). Default: true on the pgflow database, false elsewhere.
	Transactional bool
	// StatementTimeout bounds each statement; 0 takes what is left of the task's timeout.
	StatementTimeout time.Duration
	MaxRows          int   // rows of one result; default sqlcap.DefaultMaxRows
	MaxResultBytes   int64 // of one result's JSON; default sqlcap.DefaultMaxResultBytes
	// AllowPrivilegedRole lets Role be a superuser or bypass row-level security.
	AllowPrivilegedRole bool
	Line                int // of the `sql` key (the step's, or the flow's it inherits)
}

var (
	sqlKeys = []string{"role", "password_env", "database_env", "transactional", "statement_timeout", "max_rows",
		"max_result_bytes", "allow_privileged_role"}
	rangeMaxRows = intRange{1, 10_000_000}
)

const (
	maxRoleLen          = 63 // NAMEDATALEN - 1
	maxResultBytes      = 256 << 20
	maxStatementTimeout = 24 * time.Hour
)

// sql reads an `sql` value: a mapping, or false for none (a step's way to drop its flow's
// default). It returns nil for false and for a section with errors.
func (p *parser) sql(k, v *yaml.Node, where string) *SQL {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" && v.Value == "false" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		p.errorf(v.Line, "`sql` must be a mapping like {role: orders_writer}, or false for no SQL, not %s", kindName(v))
		return nil
	}
	s := &SQL{Line: k.Line, MaxRows: sqlcap.DefaultMaxRows, MaxResultBytes: sqlcap.DefaultMaxResultBytes}
	errs := len(p.errs)
	var transactional *yaml.Node
	p.eachKey(v, sqlKeys, "in `sql` "+where, func(key string, k, val *yaml.Node) {
		switch key {
		case "role":
			s.Role = p.roleName(val)
		case "database_env":
			s.DatabaseEnv = p.databaseEnv(val)
		case "password_env":
			s.PasswordEnv = p.passwordEnv(val)
		case "transactional":
			transactional = val
			s.Transactional = p.boolean(val, "sql.transactional")
		case "statement_timeout":
			s.StatementTimeout = p.statementTimeout(val)
		case "max_rows":
			p.intInto(val, "sql.max_rows", rangeMaxRows, &s.MaxRows)
		case "max_result_bytes":
			s.MaxResultBytes = p.sizeIn(val, "sql.max_result_bytes", maxResultBytes, "256MiB")
		case "allow_privileged_role":
			s.AllowPrivilegedRole = p.boolean(val, "sql.allow_privileged_role")
		}
	})
	if mapValue(v, "role") == nil {
		p.errorf(k.Line, "`sql` %s has no `role`: name the PostgreSQL role its statements run as, e.g. role: orders_writer "+
			"(its grants decide what they may touch; docs/database.md shows how to create one)", where)
	}
	switch {
	case transactional == nil:
		s.Transactional = s.DatabaseEnv == ""
	case s.Transactional && s.DatabaseEnv != "":
		p.errorf(transactional.Line, "`sql.transactional: true` needs the pgflow database (the handler's writes commit with "+
			"pgflow's completion of the task): leave out `database_env`, or write transactional: false and make the writes "+
			"safe to retry with the context's idempotency_key")
	}
	if len(p.errs) > errs {
		return nil
	}
	return s
}

func (p *parser) roleName(v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode || v.Value == "" || v.Tag != "!!str" {
		p.errorf(v.Line, "`sql.role` must be a role name like orders_writer, not %s", kindName(v))
		return ""
	}
	switch name := v.Value; {
	case len(name) > maxRoleLen:
		p.errorf(v.Line, "`sql.role` %q is %d bytes: PostgreSQL role names have at most %d", name, len(name), maxRoleLen)
	case strings.EqualFold(name, "none") || strings.EqualFold(name, "public"):
		p.errorf(v.Line, "`sql.role` %q is not a role a step can run as: name a role created for it", name)
	default:
		return name
	}
	return ""
}

func (p *parser) databaseEnv(v *yaml.Node) string {
	name := v.Value
	switch {
	case v.Kind != yaml.ScalarNode || !envNameRE.MatchString(name):
		p.errorf(v.Line, "`sql.database_env` must name an environment variable of the worker holding a database URL, e.g. ORDERS_DB_URL, not %s", kindName(v))
	case name == "DATABASE_URL":
		p.errorf(v.Line, "`sql.database_env: DATABASE_URL` is the pgflow database: leave database_env out for it")
	case strings.HasPrefix(name, "PGFLOW_WASM_") || libpqEnvRE.MatchString(name):
		p.errorf(v.Line, "`sql.database_env` may not name %s: it configures the worker itself", name)
	default:
		return name
	}
	return ""
}

func (p *parser) passwordEnv(v *yaml.Node) string {
	name := v.Value
	switch {
	case v.Kind != yaml.ScalarNode || !envNameRE.MatchString(name):
		p.errorf(v.Line, "`sql.password_env` must name an environment variable of the worker holding the role's password, "+
			"e.g. LEDGER_WRITER_PASSWORD, not %s", kindName(v))
	case name == "DATABASE_URL" || strings.HasPrefix(name, "PGFLOW_WASM_") || libpqEnvRE.MatchString(name):
		p.errorf(v.Line, "`sql.password_env` may not name %s: it configures the worker itself", name)
	default:
		return name
	}
	return ""
}

func (p *parser) statementTimeout(v *yaml.Node) time.Duration {
	const want = "write a duration like 500ms, 2s or 1m"
	if v.Kind != yaml.ScalarNode {
		p.errorf(v.Line, "`sql.statement_timeout` must be a duration: %s", want)
		return 0
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		if _, nerr := strconv.Atoi(v.Value); nerr == nil {
			p.errorf(v.Line, "`sql.statement_timeout` %s has no unit: %s", v.Value, want)
		} else {
			p.errorf(v.Line, "`sql.statement_timeout` %q is not a duration: %s", v.Value, want)
		}
		return 0
	}
	if d < time.Millisecond || d > maxStatementTimeout {
		p.errorf(v.Line, "`sql.statement_timeout` %s is out of range: from 1ms to 24h", v.Value)
		return 0
	}
	return d
}

func (p *parser) sizeIn(v *yaml.Node, key string, most uint64, mostText string) int64 {
	want := "write a size like 64KiB or 1MiB (or a number of bytes), up to " + mostText
	if v.Kind != yaml.ScalarNode {
		p.errorf(v.Line, "`%s` must be a size: %s", key, want)
		return 0
	}
	n, ok := bytesize.Parse(v.Value)
	if !ok || n < 1 || n > most {
		p.errorf(v.Line, "`%s` %q is not a size from 1 byte to %s: %s", key, v.Value, mostText, want)
		return 0
	}
	return int64(n)
}

// WhereSQL names a step in SQL messages, with the line of its sql key (its own or its
// flow's).
func (s *Step) WhereSQL(f *File, fl *Flow) string {
	if f.WithoutFlowsFile {
		return s.whereWithoutFlowsFile(fl)
	}
	line := s.Line
	if s.SQL != nil {
		line = s.SQL.Line
	}
	return fmt.Sprintf("step %q of flow %q (%s:%d)", s.Slug, fl.Slug, f.Path, line)
}
